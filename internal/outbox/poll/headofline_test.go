package poll

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// One partition unavailable (its leader offline, or NOT_ENOUGH_REPLICAS under
// acks=all) while the others are healthy. The failed events are not at
// fault, so they must not be dead-lettered however long it lasts; but they must not
// fill every claim either: the claim takes the oldest events first, and if the failed
// ones came straight back to the head of the queue, the healthy partitions would
// publish nothing (head-of-line blocking). And a failed event still holds back the
// later events of its own aggregate.
func TestRelayKeepsHealthyPartitionsFlowingWhileOneIsDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Workers = 2
	b.cfg.BatchSize = 5
	b.cfg.MaxRejections = 1 // a single failure counted as a rejection would dead-letter
	r := b.newRelay(t)

	// More events of the down partition than all workers' claims together hold, at
	// the head of the queue, then the healthy ones.
	const down, healthy = 30, 10
	for i := range down {
		b.insert(t, newMessage(t, fmt.Sprintf("down-%d", i), 0))
	}
	b.insert(t, newMessage(t, "down-0", 1)) // its predecessor cannot be published
	for i := range healthy {
		b.insert(t, newMessage(t, fmt.Sprintf("up-%d", i), 0))
	}
	partitionDown := func(rec *kgo.Record) error {
		if strings.HasPrefix(string(rec.Key), "down-") {
			return kerr.NotEnoughReplicas
		}
		return nil
	}
	// A fake, not kfake: a kfake.Fault on one partition answers with a retriable
	// error that the client retries until the publish timeout, and this test needs
	// the down partition to fail fast and the same way every time, so that only the
	// claim order decides what the healthy partitions get.
	broker := &fakeProducer{partitionDown: partitionDown}
	startWorkers(t, r, broker, broker)

	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		got := b.count(t, `SELECT count(*) FROM outbox_published WHERE aggregate_id LIKE 'up-%'`)
		return got == healthy, fmt.Sprintf("healthy partitions' events published: %d, want %d while one partition is down", got, healthy)
	})
	if got := b.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id LIKE 'down-%' AND status <> 'pending'`); got != 0 {
		t.Errorf("events of the down partition not pending: %d, want 0 (none published, none dead-lettered)", got)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_dlq`); got != 0 {
		t.Errorf("DLQ rows: %d, want 0", got)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = 'down-0' AND attempts > 0 AND seq > (
		SELECT min(seq) FROM outbox_events WHERE aggregate_id = 'down-0')`); got != 0 {
		t.Errorf("successors of a failed event that were attempted: %d, want 0", got)
	}
	if got := b.failures(t, "rejected"); got != 0 {
		t.Errorf("rejected failures: %v, want 0", got)
	}

	// The partition comes back: everything drains, down-0's two events in order.
	broker.setPartitionDown(nil)
	b.waitAllPublished(t, down+1+healthy, 30*time.Second)
	if got := b.publishedOutOfOrder(t, broker); got != 0 {
		t.Errorf("events published before an earlier event of their aggregate: %d, want 0", got)
	}
}
