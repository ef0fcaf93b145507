package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// When one partition stops answering while the others are healthy (its leader is cut
// off from this relay), every record sent to it waits the whole PublishTimeout before it
// fails, and so does every other record of its produce call: a batch returns only once
// the broker has judged all of it. New events keep hashing to that partition, so nearly
// every batch would carry one of them, and every worker would spend most of its time
// waiting on the one partition that cannot answer. The healthy partitions' events wait
// with them (the partition-offline chaos scenario measures it: partitionoffline.go).
//
// The partition breaker stops that. A partition whose records hit a transport failure
// while the broker acknowledged other records of this relay (in the same batch or in
// another one, since the failed batch was sent) is "open": the broker answers, but not
// for it. The next batches hold its records back without sending them: they stay
// pending, with last_error saying why, until the breaker lets them through again
// (store.recordFailures counts no attempt for them). Once the partition has been open
// for its backoff, one batch for the whole relay probes it: it sends that partition's
// records, so at most one worker at a time waits on a partition that may still be down.
// An acknowledgement closes the breaker; another failure keeps it open, for twice as
// long (OutageBackoffBase doubled per failure, up to OutageBackoffMax).
//
// Holding back never reorders an aggregate: a held-back event stays in the outbox, and
// the claim's order rule keeps every later event of its aggregate behind it.

// partitionBreaker is the relay's record of partitions that stopped answering, shared
// by its workers. Each Relay (each API replica) keeps its own.
type partitionBreaker struct {
	base, max time.Duration
	// now is the breaker's clock: time.Now, or a test's.
	now func() time.Time

	mu   sync.Mutex
	open map[int32]*openPartition
	// probeEnds is the zero time when no probe is out. While one is, it is the
	// deadline after which the breaker stops waiting for that probe's verdict (its
	// worker never reported back); judged ends the probe as soon as it does.
	probeEnds time.Time
	// lastAck is when the broker last acknowledged a record of this relay.
	lastAck time.Time
}

// openPartition is a partition that stopped answering.
type openPartition struct {
	failures int       // consecutive failed publishes to it
	until    time.Time // its records are held back before this
}

func newPartitionBreaker(base, max time.Duration) *partitionBreaker {
	return &partitionBreaker{base: base, max: max, now: time.Now, open: map[int32]*openPartition{}}
}

// anyOpen reports whether some partition is open: only then does a batch need to know
// where its records go.
func (b *partitionBreaker) anyOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.open) > 0
}

// openCount is how many partitions are open, for the metric.
func (b *partitionBreaker) openCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.open)
}

// admission is what the breaker decided for one batch.
type admission struct {
	// holdFor is, for each record held back, how long until the breaker may let its
	// partition through; records not in it are sent.
	holdFor map[*kgo.Record]time.Duration
	// probed are the open partitions this batch sends to: its probe.
	probed map[int32]bool
}

// admit decides which of a batch's records go out, given the partition of each; the
// batch's publish may take probeTime (the worker's publish timeout now). A record of
// a closed partition goes. One of an open partition goes only as this batch's probe:
// its backoff is over and no other batch is probing. Taking the probe holds every
// other batch off the open partitions until its verdict is judged. Without
// partitionOf (no partition open, or the partition count unknown) every record goes.
func (b *partitionBreaker) admit(records []*kgo.Record, partitionOf map[*kgo.Record]int32, probeTime time.Duration) admission {
	a := admission{holdFor: map[*kgo.Record]time.Duration{}, probed: map[int32]bool{}}
	if partitionOf == nil {
		return a
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for _, rec := range records {
		p := partitionOf[rec]
		op := b.open[p]
		switch {
		case op == nil || a.probed[p]:
			continue // closed, or already part of this batch's probe
		case now.Before(op.until):
			a.holdFor[rec] = op.until.Sub(now)
		case now.Before(b.probeEnds) && len(a.probed) == 0:
			a.holdFor[rec] = b.probeEnds.Sub(now) // another batch is probing
		default:
			b.probeEnds = now.Add(probeVerdictWait(probeTime))
			op.until = b.probeEnds // until the probe's outcome, nothing else goes
			a.probed[p] = true
		}
	}
	return a
}

// probeVerdictWait is how long the breaker waits for the verdict on a probe whose
// publish may take probeTime. The publish starts after the admission and its verdict
// reaches judged after the publish returns, so a probe that waits its whole timeout
// reports back a little later than probeTime after its admission. Ending the probe at
// probeTime would let a second batch probe while the first is still being judged
// (TestBreakerKeepsAProbeOutUntilItsVerdictIsJudged); twice probeTime only matters when
// a worker never reports back at all.
func probeVerdictWait(probeTime time.Duration) time.Duration { return 2 * probeTime }

// acked notes that the broker acknowledged a record of this relay just now.
func (b *partitionBreaker) acked() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastAck = b.now()
}

// answeredSince reports whether the broker acknowledged a record of this relay after
// t: then a batch sent at t that got no answer met a partition that does not answer,
// not a broker down for all.
func (b *partitionBreaker) answeredSince(t time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastAck.After(t)
}

// judged records the broker's verdicts on the partitions a batch sent to: acked are the
// partitions with an acknowledged record, failed those with a transport failure and no
// acknowledgement. A failure opens a closed partition only when the broker answered
// since the batch was sent (answered), so that the broker is up, if not for it; a
// broker down for all is the relay's outage pause (failure.go), not this. It ends the
// batch's probe, if it was one.
func (b *partitionBreaker) judged(a admission, acked, failed map[int32]bool, answered bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(a.probed) > 0 {
		b.probeEnds = time.Time{}
	}
	for p := range acked {
		delete(b.open, p)
	}
	for p := range failed {
		op := b.open[p]
		if op == nil {
			if !answered {
				continue
			}
			op = &openPartition{}
			b.open[p] = op
		}
		op.until = b.now().Add(backoff(b.base, b.max, op.failures))
		op.failures++
	}
}

// keyPartition is the partition Kafka's rule puts a record with this key in, among n:
// the murmur2 hash of the key, modulo n, the rule of Kafka's own producer for keyed
// records. The relay's clients are configured to partition by it (clientOpts), so
// the breaker knows where a record goes before it is sent.
func keyPartition(key []byte, n int) int32 {
	return int32(keyPartitioner.ForTopic("").Partition(&kgo.Record{Key: key}, n))
}

// keyPartitioner partitions a keyed record by the murmur2 hash of its key.
var keyPartitioner = kgo.StickyKeyPartitioner(nil)

// metadataCache is the one method partitionCount needs of a Kafka client; *kgo.Client
// has it, and so does every producer of the relay.
type metadataCache interface {
	RequestCachedMetadata(ctx context.Context, req *kmsg.MetadataRequest, limit time.Duration) (*kmsg.MetadataResponse, error)
}

// partitionCount is the number of partitions of topic, from the client's metadata
// cache (the producer keeps it current), or 0 when it is not known.
func partitionCount(ctx context.Context, p metadataCache, topic string) int {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := p.RequestCachedMetadata(ctx, req, time.Minute)
	if err != nil {
		return 0
	}
	for _, rt := range resp.Topics {
		if rt.Topic != nil && *rt.Topic == topic && rt.ErrorCode == 0 {
			return len(rt.Partitions)
		}
	}
	return 0
}

// partitionsOf is the partition of each record of topic, by the rule the relay's
// clients partition with (keyPartition), or nil when the topic's partition count is
// unknown. Both relays use it (PartitionsOf).
func partitionsOf(ctx context.Context, p metadataCache, topic string, records []*kgo.Record) map[*kgo.Record]int32 {
	n := partitionCount(ctx, p, topic)
	if n == 0 {
		return nil
	}
	out := make(map[*kgo.Record]int32, len(records))
	for _, rec := range records {
		out[rec] = keyPartition(rec.Key, n)
	}
	return out
}
