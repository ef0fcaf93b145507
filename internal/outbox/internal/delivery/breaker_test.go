package delivery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// A probe that waits its whole publish timeout reaches judged a little after that
// timeout. Until it does, the probe is still out: no second batch may probe the
// partition meanwhile.
func TestBreakerKeepsAProbeOutUntilItsVerdictIsJudged(t *testing.T) {
	t.Parallel()
	const probeTime = 500 * time.Millisecond
	b := NewPartitionBreaker(time.Millisecond, time.Millisecond)
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	b.now = func() time.Time { return clock }
	batch := func(key string) ([]*kgo.Record, map[*kgo.Record]int32) {
		rec := &kgo.Record{Key: []byte(key)}
		return []*kgo.Record{rec}, map[*kgo.Record]int32{rec: 1}
	}
	// failedOn1 is a batch whose one record of partition 1 hit a transport failure.
	failedOn1 := func() (kgo.ProduceResults, map[*kgo.Record]int32) {
		rec := &kgo.Record{Key: []byte("failed")}
		return kgo.ProduceResults{{Record: rec, Err: context.DeadlineExceeded}}, map[*kgo.Record]int32{rec: 1}
	}
	results, failedPartitions := failedOn1()
	b.Judge(Admission{}, results, failedPartitions, true) // partition 1 opens
	clock = clock.Add(10 * time.Millisecond)              // past its backoff

	records, partitionOf := batch("first")
	probe := b.Admit(records, partitionOf, probeTime)
	if !probe.Probed[1] {
		t.Fatalf("first batch after the backoff: probed %v, want partition 1", probe.Probed)
	}
	// The probe's publish took its whole timeout, and a little more; its worker has
	// not judged it yet.
	clock = clock.Add(probeTime + 100*time.Millisecond)
	records, partitionOf = batch("second")
	second := b.Admit(records, partitionOf, probeTime)
	if second.Probed[1] {
		t.Errorf("a second batch probed partition 1 while the first probe awaited its verdict")
	}
	if _, held := second.HoldFor[records[0]]; !held {
		t.Errorf("the second batch's record of partition 1 was not held back")
	}

	results, failedPartitions = failedOn1()
	b.Judge(probe, results, failedPartitions, true) // the probe failed
	clock = clock.Add(10 * time.Millisecond)        // past the new backoff
	records, partitionOf = batch("third")
	if third := b.Admit(records, partitionOf, probeTime); !third.Probed[1] {
		t.Errorf("first batch after the probe's verdict and its backoff: probed %v, want partition 1", third.Probed)
	}
}

// The breaker computes where a record goes before it is sent; a client configured
// with ClientOpts must put it there, on the real broker, or the breaker holds back the
// wrong events.
func TestKeyPartitionIsWhereTheRelaysClientWritesARecord(t *testing.T) {
	t.Parallel()
	topic := testenv.NewTopic(t, 3)
	cl, err := kgo.NewClient(ClientOpts(testenv.KafkaBrokers(t), time.Second)...)
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	t.Cleanup(cl.Close)
	var records []*kgo.Record
	for i := range 50 {
		records = append(records, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "payment-%d", i), Value: []byte("{}")})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	n := partitionCount(ctx, cl, topic)
	if n != 3 {
		t.Fatalf("partitionCount = %d, want the test topic's 3", n)
	}
	for _, rec := range records {
		if want := keyPartition(rec.Key, n); rec.Partition != want {
			t.Errorf("key %s written to partition %d, keyPartition says %d", rec.Key, rec.Partition, want)
		}
	}
}
