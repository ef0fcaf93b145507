package clockskew

import (
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
)

// Scenario is the clock-skew scenario: the broker refuses the relay's timestamps for a
// while. short makes the refusals shorter, for the CI test.
func Scenario(short bool) harness.Scenario {
	skew := &clockSkew{Skew: 10 * time.Minute, Window: 30 * time.Second}
	if short {
		skew.Window = 12 * time.Second
	}
	return harness.Scenario{
		Name: "clock-skew",
		Description: "our relay stamps its records " + skew.Skew.String() + " ahead (fault-injection knob RELAY_FAULT_TIMESTAMP_SKEW, reference service only) and, for " + skew.Window.String() +
			" in the middle of a load paced over 20 s, the topic's " + timestampLimitConfig + " is below the skew, so the broker refuses every record with INVALID_TIMESTAMP; the relay must wait it out like an outage, dead-letter nothing and deliver everything once the limit is back",
		Span:      20 * time.Second,
		LoadDelay: -5 * time.Second, // the load starts first; the refusals 5 s into it
		APIEnv:    skew.env(),
		Disrupt:   skew.disrupt,
		Validity:  skew.validity,
	}
}
