package outbox

import (
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// PublishTimeouts backs off the publish timeout of a Kafka client after transport
// failures, as a TCP sender backs off its retransmission timer: after a publish with a
// transport failure, the next one may take twice as long, and any answer of the broker
// resets it. The zero value is ready; it is safe for concurrent use.
//
// Why: a publish that times out with records on the wire makes franz-go drop that
// connection, and a new one costs a round trip of its own (Kafka's ApiVersions
// handshake) before the produce's. Against a broker that answers in more than half a
// publish timeout, a publish that had to fit both in one timeout timed out in turn,
// dropped its connection again, and never succeeded; with twice as long it fits, and
// the publishes after it, on the open connection, fit in one again
// (TestRelayKeepsPublishingThroughSlowAcksAfterATimeout; docs/adr/0005).
type PublishTimeouts struct {
	failures atomic.Int32 // publishes in a row with a transport failure
}

// Next is how long the next publish may take: base, doubled for each publish in a row
// that had a transport failure, at most 16 times base.
func (t *PublishTimeouts) Next(base time.Duration) time.Duration {
	return base << min(t.failures.Load(), 4)
}

// Judge counts a publish by its results: a transport failure doubles the next timeout,
// as long as it stays within budget (what the caller can give a publish at most), and
// anything else, an answer of the broker, resets it.
func (t *PublishTimeouts) Judge(results kgo.ProduceResults, base, budget time.Duration) {
	for _, res := range results {
		if res.Err != nil && !isRejection(res.Err) {
			if t.Next(base)*2 <= budget {
				t.failures.Add(1)
			}
			return
		}
	}
	t.failures.Store(0)
}
