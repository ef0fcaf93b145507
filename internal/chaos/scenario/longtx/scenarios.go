package longtx

import (
	"cmp"
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
)

// DefaultHold is how long the long-transaction scenario holds its snapshot unless told
// otherwise: several minutes would be closer to the forgotten session of production,
// and -long-tx-hold gives them, but two keep make chaos-all near a quarter of an hour
// and already show the dead tuples piling up (the report's figures).
const DefaultHold = 2 * time.Minute

// Scenario is the long-transaction scenario with the snapshot held for hold (0:
// DefaultHold, or 20 s when short). Its load is its own, a steady rate over the three
// phases, and replaces harness.Options.Payments.
func Scenario(short bool, hold time.Duration) harness.Scenario {
	lt := &longTransaction{Rate: 10, Before: 30 * time.Second, Hold: cmp.Or(hold, DefaultHold), After: 30 * time.Second}
	if short {
		lt = &longTransaction{Rate: 5, Before: 10 * time.Second, Hold: cmp.Or(hold, 20*time.Second), After: 10 * time.Second}
	}
	return harness.Scenario{
		Name: "long-transaction",
		Description: fmt.Sprintf("payments at a steady %.0f/s for %s; %s into the load a session opens a REPEATABLE READ transaction, reads the outbox and stays idle in transaction for %s, so that no dead row version can be removed; "+
			"the relay's throughput and 201-to-topic latency before, during and after, and the outbox table's dead tuples and size, are measured; the relay must keep up with the incoming rate in every phase",
			lt.Rate, lt.span(), lt.Before, lt.Hold),
		Span:      lt.span(),
		Payments:  lt.payments(),
		LoadDelay: -lt.Before,
		Disrupt:   lt.disrupt,
		Validity:  lt.validity,
	}
}
