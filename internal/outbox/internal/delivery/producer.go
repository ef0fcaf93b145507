package delivery

import (
	"context"

	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Producer is what a relay needs from a Kafka client; *kgo.Client satisfies it.
type Producer interface {
	ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults
	// RequestCachedMetadata answers from the client's metadata cache: the partition
	// breaker needs the topic's partition count to know where a record goes.
	MetadataCache
}

// ClientOpts are the producer options of both relays, so that no publish can hang.
// franz-go's default producer is idempotent with acks=all, and once a produce request
// carrying a record is on the wire it refuses to fail that record: it cannot tell
// "never received" from "written, reply lost", so it waits for the outcome. A
// ProduceSync to a broker that stalls can therefore block far past its context, and
// RecordDeliveryTimeout (no limit by default) is not enforced in that state either.
// AllowIdempotentProduceCancellation lets the context deadline, RecordDeliveryTimeout
// and retry exhaustion fail such a record (both options are documented at
// https://pkg.go.dev/github.com/twmb/franz-go/pkg/kgo). The price is a possible
// duplicate when the broker wrote a record whose ack was lost, which consumers absorb
// by X-Event-Id.
//
// publishTimeout is the relay's bound on one publish; extra options (a test's
// kgo.Dialer, the CDC relay's default topic) are appended after these.
func ClientOpts(brokers []string, publishTimeout time.Duration, extra ...kgo.Opt) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.AllowIdempotentProduceCancellation(),
		// A backstop for the per-publish context deadline.
		kgo.RecordDeliveryTimeout(publishTimeout + time.Second),
		// A silent socket is noticed after ProduceRequestTimeout + overhead, not the
		// default 20 s.
		kgo.ProduceRequestTimeout(3 * time.Second),
		kgo.RequestTimeoutOverhead(2 * time.Second),
		kgo.DialTimeout(3 * time.Second),
		// Retries after NOT_LEADER and the like wait for a metadata refresh, which
		// is gated by this age (default 5 s).
		kgo.MetadataMinAge(250 * time.Millisecond),
		// ProduceSync flushes its own records at once; lingering would only add
		// latency.
		kgo.ProducerLinger(0),
		// Kafka's rule for keyed records, pinned rather than left to the client's
		// default, because the partition breaker computes with it where a record goes
		// before it is sent (keyPartition, in breaker.go).
		kgo.RecordPartitioner(keyPartitioner),
	}
	return append(opts, extra...)
}

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
		if res.Err != nil && !IsRejection(res.Err) {
			if t.failures.Load() < maxDoublings {
				t.failures.Add(1)
			}
			return
		}
	}
	t.failures.Store(0)
}
