package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// One partition stops answering: its leader is cut off from the relay, so every record
// sent to it waits the whole publish timeout, and so does the rest of its batch (the
// partition-offline chaos scenario). Once the relay has seen that, at most one batch at
// a time may wait on that partition (the breaker's probe); the other batches hold its
// records back unsent, so the healthy partitions' events keep flowing. When the
// partition answers again, its events are published, each of an aggregate in order.
func TestBreakerLetsOnlyOneBatchAtATimeWaitOnAPartitionThatStoppedAnswering(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Workers = 3
	b.cfg.BatchSize = 4
	b.cfg.PublishTimeout = 300 * time.Millisecond
	b.cfg.OutageBackoffBase = 200 * time.Millisecond
	b.cfg.OutageBackoffMax = 400 * time.Millisecond
	r := b.newRelay(t)

	const partitions, silent = 6, int32(2)
	broker := &fakeProducer{partitions: partitions}
	broker.setSilent(new(silent))
	startWorkers(t, r, broker, broker)

	// Events arrive while the partition is silent, as under load: two events per
	// aggregate, so each aggregate's order is at stake too.
	healthy := 0
	const n = 120
	for i := range n {
		key := fmt.Sprintf("agg-%d", i)
		if keyPartition([]byte(key), partitions) != silent {
			healthy++
		}
		b.insert(t, newMessage(t, key, 0), newMessage(t, key, 1))
		time.Sleep(15 * time.Millisecond)
	}

	testenv.WaitFor(t, 20*time.Second, func() (bool, string) {
		got := b.count(t, `SELECT count(*) FROM outbox_published`)
		return got == 2*healthy, fmt.Sprintf("events published while partition %d is silent: %d, want %d (every healthy partition's)", silent, got, 2*healthy)
	})
	overlapping, calls := broker.overlappingSilentCalls(b.cfg.PublishTimeout)
	if calls == 0 {
		t.Errorf("no call to the silent partition after the relay could know it was silent: no probe")
	}
	if overlapping > 0 {
		t.Errorf("calls that waited on the silent partition while another did, once the first had failed: %d of %d, want 0", overlapping, calls)
	}
	if got := testutil.ToFloat64(b.metrics.heldBack); got == 0 {
		t.Errorf("outbox_held_back_total = 0, want > 0: the silent partition's records were all sent")
	}
	if got := testutil.ToFloat64(b.metrics.partitionsUnavailable); got != 1 {
		t.Errorf("outbox_partitions_unavailable = %v, want 1", got)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_events WHERE last_error LIKE 'held back, not sent%'`); got == 0 {
		t.Errorf("rows whose last_error says they were held back: 0, want > 0")
	}

	broker.setSilent(nil)
	b.waitAllPublished(t, 2*n, 20*time.Second)
	if got := b.publishedOutOfOrder(t, broker); got != 0 {
		t.Errorf("events published before an earlier event of their aggregate: %d, want 0", got)
	}
	testenv.WaitFor(t, 5*time.Second, func() (bool, string) {
		got := testutil.ToFloat64(b.metrics.partitionsUnavailable)
		return got == 0, fmt.Sprintf("outbox_partitions_unavailable = %v once the partition answers, want 0", got)
	})
}

// A probe that waits its whole publish timeout reaches judged a little after that
// timeout. Until it does, the probe is still out: no second batch may probe the
// partition meanwhile.
func TestBreakerKeepsAProbeOutUntilItsVerdictIsJudged(t *testing.T) {
	t.Parallel()
	const probeTime = 500 * time.Millisecond
	b := newPartitionBreaker(time.Millisecond, time.Millisecond)
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	b.now = func() time.Time { return clock }
	batch := func(key string) ([]*kgo.Record, map[*kgo.Record]int32) {
		rec := &kgo.Record{Key: []byte(key)}
		return []*kgo.Record{rec}, map[*kgo.Record]int32{rec: 1}
	}
	b.judged(admission{}, nil, map[int32]bool{1: true}, true) // partition 1 opens
	clock = clock.Add(10 * time.Millisecond)                  // past its backoff

	records, partitionOf := batch("first")
	probe := b.admit(records, partitionOf, probeTime)
	if !probe.probed[1] {
		t.Fatalf("first batch after the backoff: probed %v, want partition 1", probe.probed)
	}
	// The probe's publish took its whole timeout, and a little more; its worker has
	// not judged it yet.
	clock = clock.Add(probeTime + 100*time.Millisecond)
	records, partitionOf = batch("second")
	second := b.admit(records, partitionOf, probeTime)
	if second.probed[1] {
		t.Errorf("a second batch probed partition 1 while the first probe awaited its verdict")
	}
	if _, held := second.holdFor[records[0]]; !held {
		t.Errorf("the second batch's record of partition 1 was not held back")
	}

	b.judged(probe, nil, map[int32]bool{1: true}, true) // the probe failed
	clock = clock.Add(10 * time.Millisecond)            // past the new backoff
	records, partitionOf = batch("third")
	if third := b.admit(records, partitionOf, probeTime); !third.probed[1] {
		t.Errorf("first batch after the probe's verdict and its backoff: probed %v, want partition 1", third.probed)
	}
}

// The breaker computes where a record goes before it is sent; the relay's real client
// must put it there, on the real broker, or the breaker holds back the wrong events.
func TestKeyPartitionIsWhereTheRelaysClientWritesARecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newRelay(t)
	cl := newProducer(t, r)
	var records []*kgo.Record
	for i := range 50 {
		records = append(records, &kgo.Record{Topic: b.topic, Key: fmt.Appendf(nil, "payment-%d", i), Value: []byte("{}")})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	n := partitionCount(ctx, cl, b.topic)
	if n != 3 {
		t.Fatalf("partitionCount = %d, want the test topic's 3", n)
	}
	for _, rec := range records {
		if want := keyPartition(rec.Key, n); rec.Partition != want {
			t.Errorf("key %s written to partition %d, keyPartition says %d", rec.Key, rec.Partition, want)
		}
	}
}
