package outbox

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// PublishTimeouts backs off the publish timeout of a Kafka client after transport
// failures, as a TCP sender backs off its retransmission timer: after a publish with a
// transport failure, the next one may take twice as long, up to what the caller can give
// a publish at most, and any answer of the broker resets it. The zero value is ready;
// it is safe for concurrent use.
//
// Why: a publish that times out with records on the wire makes franz-go drop that
// connection, and the next publish pays for a new one first: a metadata refresh, then
// Kafka's ApiVersions handshake, each a round trip of its own, before the produce's.
// Against a broker that answers in more than a third of a publish timeout, a publish
// that had to fit all three in one timeout would time out in turn, drop its connection
// again, and never get through; with longer it fits, and the publishes after it, on the
// open connection, fit in one again (TestRelayKeepsPublishingThroughSlowAcksAfterATimeout;
// docs/adr/0005).
type PublishTimeouts struct {
	failures atomic.Int32 // publishes in a row with a transport failure, at most maxDoublings
}

// maxDoublings caps the back-off at 16 times the base timeout.
const maxDoublings = 4

// Next is how long the next publish may take: base, doubled for each publish in a row
// that had a transport failure, at most 16 times base and at most budget, what the
// caller can give a publish at all (never less than base).
//
// The budget caps the timeout rather than stopping its growth: with a 3 s timeout and 5
// s of budget (the chaos scenarios' lease), a doubling never fits, yet the 5 s are what
// lets a publish on a new connection fit behind a slow broker (docs/adr/0005).
func (t *PublishTimeouts) Next(base, budget time.Duration) time.Duration {
	return max(base, min(base<<min(t.failures.Load(), maxDoublings), budget))
}

// Judge counts a publish by its results: a transport failure doubles the next timeout,
// and anything else, an answer of the broker, resets it.
func (t *PublishTimeouts) Judge(results kgo.ProduceResults) {
	for _, res := range results {
		if res.Err != nil && !isRejection(res.Err) {
			if t.failures.Load() < maxDoublings {
				t.failures.Add(1)
			}
			return
		}
	}
	t.failures.Store(0)
}
