package storm

import (
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// Scenario is the idempotency-storm scenario: every Idempotency-Key sent by several
// clients at once while the API is SIGKILLed. short makes fewer kills and a shorter
// load, for the CI test.
func Scenario(short bool) harness.Scenario {
	storm, stormSpan := newIdempotencyStorm(short)
	return harness.Scenario{
		Name: "idempotency-storm",
		Description: fmt.Sprintf("every Idempotency-Key sent by %d clients at once (creations, captures, refunds) during a load paced over %s, each attempt timed out by its client after %s to %s (less than the API's 5 s budget) and retried with the same key, "+
			"while the API reaches PostgreSQL with +%s on every statement (proxy %s) and is SIGKILLed %d times with keyed requests in flight, and restarted; "+
			"each key must make one payment (transition) and one event, every 201 (200) of a key must name the same payment (event), and the answers must be 201 (200), 409 with Retry-After, 422 or 503 with Retry-After",
			storm.Copies, stormSpan, storm.ClientTimeout[0], storm.ClientTimeout[1], storm.Latency, devstack.PostgresProxy, storm.Kills),
		Span:                    stormSpan,
		LoadDelay:               -time.Second, // the load starts first; the first kill comes during it
		APIThroughPostgresProxy: true,
		Load:                    storm.load,
		Disrupt:                 storm.disrupt,
		FinishDisruption:        true,
		Validity:                storm.validity,
	}
}
