package delivery

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dscourse/payments-outbox/internal/backoff"
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
// (package poll's store.recordFailures counts no attempt for them). Once the partition
// has been open for its backoff, one batch for the whole relay probes it: it sends that
// partition's records, so at most one worker at a time waits on a partition that may
// still be down.
// An acknowledgement closes the breaker; another failure keeps it open, for twice as
// long (OutageBackoffBase doubled per failure, up to OutageBackoffMax).
//
// Holding back never reorders an aggregate: a held-back event stays in the outbox, and
// the claim's order rule keeps every later event of its aggregate behind it.

// PartitionBreaker is a relay's record of partitions that stopped answering, shared by
// its workers. Each relay (each API replica) keeps its own. It is safe for concurrent
// use.
type PartitionBreaker struct {
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

// NewPartitionBreaker returns a breaker whose open partitions wait base, doubled per
// failed probe up to max, before the next probe.
func NewPartitionBreaker(base, max time.Duration) *PartitionBreaker {
	return &PartitionBreaker{base: base, max: max, now: time.Now, open: map[int32]*openPartition{}}
}

// AnyOpen reports whether some partition is open: only then does a batch need to know
// where its records go.
func (b *PartitionBreaker) AnyOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.open) > 0
}

// OpenCount is how many partitions are open, for outbox_partitions_unavailable.
func (b *PartitionBreaker) OpenCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.open)
}

// IsOpen reports whether partition p stopped answering: its records are not to be sent
// but as a probe (Admit).
func (b *PartitionBreaker) IsOpen(p int32) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open[p] != nil
}

// An Admission is what the breaker decided for one batch (Admit).
type Admission struct {
	// HoldFor is, for each record held back, how long until the breaker may let its
	// partition through; records not in it are sent.
	HoldFor map[*kgo.Record]time.Duration
	// Probed are the open partitions this batch sends to: its probe.
	Probed map[int32]bool
}

// Admit decides which of a batch's records go out, given the partition of each; the
// batch's publish may take probeTime (the worker's publish timeout now). A record of
// a closed partition goes. One of an open partition goes only as this batch's probe:
// its backoff is over and no other batch is probing. Taking the probe holds every
// other batch off the open partitions until its verdict is judged. Without
// partitionOf (no partition open, or the partition count unknown) every record goes.
// Every Admit must be followed by a Judge of what was sent, which ends its probe.
func (b *PartitionBreaker) Admit(records []*kgo.Record, partitionOf map[*kgo.Record]int32, probeTime time.Duration) Admission {
	a := Admission{HoldFor: map[*kgo.Record]time.Duration{}, Probed: map[int32]bool{}}
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
		case op == nil || a.Probed[p]:
			continue // closed, or already part of this batch's probe
		case now.Before(op.until):
			a.HoldFor[rec] = op.until.Sub(now)
		case now.Before(b.probeEnds) && len(a.Probed) == 0:
			a.HoldFor[rec] = b.probeEnds.Sub(now) // another batch is probing
		default:
			b.probeEnds = now.Add(probeVerdictWait(probeTime))
			op.until = b.probeEnds // until the probe's outcome, nothing else goes
			a.Probed[p] = true
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

// Acked notes that the broker acknowledged a record of this relay just now.
func (b *PartitionBreaker) Acked() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastAck = b.now()
}

// AnsweredSince reports whether the broker acknowledged a record of this relay after
// t: then a batch sent at t that got no answer met a partition that does not answer,
// not a broker down for all.
func (b *PartitionBreaker) AnsweredSince(t time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastAck.After(t)
}

// Judge records the broker's results on the records an Admission let through,
// partition by partition (partitionOf as given to Admit, or computed after the call;
// nil judges no partition): a partition with an acknowledged record closes, and one
// with a transport failure and no acknowledgement stays open. A failure opens a closed partition only when the broker answered
// since the batch was sent (answered), so that the broker is up, if not for it; a
// broker down for all is the relay's outage pause (package poll's failure.go), not this. It ends the
// batch's probe, if it was one. A call sent without asking Admit (to partitions known
// to be closed) is judged with the zero Admission.
func (b *PartitionBreaker) Judge(a Admission, results kgo.ProduceResults, partitionOf map[*kgo.Record]int32, answered bool) {
	acked, failed := partitionVerdicts(results, partitionOf)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(a.Probed) > 0 {
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
		op.until = b.now().Add(backoff.Delay(b.base, b.max, op.failures))
		op.failures++
	}
}

// keyPartition is the partition Kafka's rule puts a record with this key in, among n:
// the murmur2 hash of the key, modulo n, the rule of Kafka's own producer for keyed
// records. The relays' clients are configured to partition by it (ClientOpts), so
// the breaker knows where a record goes before it is sent.
func keyPartition(key []byte, n int) int32 {
	return int32(keyPartitioner.ForTopic("").Partition(&kgo.Record{Key: key}, n))
}

// keyPartitioner partitions a keyed record by the murmur2 hash of its key.
var keyPartitioner = kgo.StickyKeyPartitioner(nil)

// MetadataCache is the one method PartitionsOf needs of a Kafka client; *kgo.Client
// has it.
type MetadataCache interface {
	RequestCachedMetadata(ctx context.Context, req *kmsg.MetadataRequest, limit time.Duration) (*kmsg.MetadataResponse, error)
}

// partitionCount is the number of partitions of topic, from the client's metadata
// cache (the producer keeps it current), or 0 when it is not known.
func partitionCount(ctx context.Context, p MetadataCache, topic string) int {
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

// PartitionsOf is the partition of each record of topic, by the rule the relays'
// clients partition with (keyPartition), with the partition count from p's metadata
// cache, or nil when that count is not known.
func PartitionsOf(ctx context.Context, p MetadataCache, topic string, records []*kgo.Record) map[*kgo.Record]int32 {
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

// partitionVerdicts sorts the partitions a batch sent to, by the broker's results:
// acked are those with an acknowledged record, failed those with a transport failure
// and no acknowledgement (Judge). Both are empty without partitionOf.
func partitionVerdicts(results kgo.ProduceResults, partitionOf map[*kgo.Record]int32) (acked, failed map[int32]bool) {
	acked, failed = map[int32]bool{}, map[int32]bool{}
	if partitionOf == nil {
		return acked, failed
	}
	for _, res := range results {
		part := partitionOf[res.Record]
		switch {
		case res.Err == nil:
			acked[part] = true
		case !IsRejection(res.Err):
			failed[part] = true
		}
	}
	for part := range acked {
		delete(failed, part)
	}
	return acked, failed
}
