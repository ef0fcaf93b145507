package poll

import (
	"fmt"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/fakebroker"
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
	// A fake, not kfake: kfake answers a produce request whole, so it cannot leave one
	// partition of a request unanswered while it acknowledges the others.
	broker := &fakeProducer{Partitions: fakebroker.Partitions{N: partitions}}
	broker.SetSilent(new(silent))
	startWorkers(t, r, broker, broker)

	// Events arrive while the partition is silent, as under load: two events per
	// aggregate, so each aggregate's order is at stake too.
	healthy := 0
	const n = 120
	for i := range n {
		key := fmt.Sprintf("agg-%d", i)
		if broker.PartitionOf([]byte(key)) != silent {
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
	if got := b.metric(t, "outbox_held_back_total"); got == 0 {
		t.Errorf("outbox_held_back_total = 0, want > 0: the silent partition's records were all sent")
	}
	if got := b.metric(t, "outbox_partitions_unavailable"); got != 1 {
		t.Errorf("outbox_partitions_unavailable = %v, want 1", got)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_events WHERE last_error LIKE 'held back, not sent%'`); got == 0 {
		t.Errorf("rows whose last_error says they were held back: 0, want > 0")
	}

	broker.SetSilent(nil)
	b.waitAllPublished(t, 2*n, 20*time.Second)
	if got := b.publishedOutOfOrder(t, broker); got != 0 {
		t.Errorf("events published before an earlier event of their aggregate: %d, want 0", got)
	}
	testenv.WaitFor(t, 5*time.Second, func() (bool, string) {
		got := b.metric(t, "outbox_partitions_unavailable")
		return got == 0, fmt.Sprintf("outbox_partitions_unavailable = %v once the partition answers, want 0", got)
	})
}
