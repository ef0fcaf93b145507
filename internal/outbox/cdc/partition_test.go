package cdc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// While one partition never answers (its leader cut off from the relay, as in the
// partition-offline chaos scenario), its events are parked beside the stream and the
// other partitions' events, committed after them, are published; the slot is not
// confirmed past the first parked event, so a crash would republish it. Once the
// partition answers again, the parked events are published, each aggregate's second
// event only after its first was acknowledged, and the slot moves past everything.
func TestSilentPartitionIsParkedWhileTheOthersFlow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := newFakeProducer(3)
	relay := b.startOn(t, fake)
	w := b.parkOnSilentPartition(t, relay, fake)

	fake.SetSilent(nil)
	b.waitPublished(t, 3+len(w.silentIDs)+len(w.healthyIDs), 60*time.Second)
	for agg, ids := range w.byAggregate {
		first, second := ids[0].String(), ids[1].String()
		if acked, sent := fake.ackedAt(first), fake.sentAt(second); acked == 0 || sent < acked {
			t.Errorf("aggregate %s: second event sent at step %d, first acknowledged at step %d: want the second sent after", agg, sent, acked)
		}
	}
	last := b.currentLSN(t)
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		got := b.confirmedLSN(t)
		return got >= last, fmt.Sprintf("slot confirmed to %d, want at least %d once every event is published", got, last)
	})
}

// A relay stopped while events are parked leaves them to the slot: the next relay,
// which knows nothing of them but the slot's confirmed position (its catch-up is done),
// streams them again and publishes them.
func TestParkedEventsAreStreamedAgainAfterARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.startOn(t, newFakeProducer(3))
	w := b.parkOnSilentPartition(t, first, first.fake)
	first.stop()

	next := newFakeProducer(3) // every partition answers
	b.startOn(t, next)
	b.waitPublished(t, 3+len(w.silentIDs)+len(w.healthyIDs), 60*time.Second)
	for _, id := range w.silentIDs {
		if next.ackedAt(id.String()) == 0 {
			t.Errorf("parked event %s not published by the relay started after the stop", id)
		}
	}
}

// parkedWorld is what parkOnSilentPartition committed.
type parkedWorld struct {
	byAggregate           map[string][]uuid.UUID // two events each, in commit order
	silentIDs, healthyIDs []uuid.UUID
}

// parkOnSilentPartition publishes a warm-up, waits for a quiet moment, makes partition
// 0 of fake silent, commits two events for each of 12 aggregates, and returns once the
// relay has published every event of the other partitions and parked those of
// partition 0, with the slot confirmed no further than the first parked event.
func (b *testBundle) parkOnSilentPartition(t *testing.T, relay *testRelay, fake *fakeProducer) parkedWorld {
	t.Helper()
	b.insert(t, "warmup", 3)
	b.waitPublished(t, 3, 90*time.Second)
	// A quiet outbox first, longer than a publish timeout: the first batch of the silent
	// partition then fails with no acknowledgement anywhere near it, as a broker down
	// for all would, and must still be told apart from one (parkFailed).
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		quiet := fake.quietFor()
		return quiet > 2*b.cfg.PublishTimeout, fmt.Sprintf("last acknowledgement %s ago", quiet)
	})

	silent := int32(0)
	var silentAggs, healthyAggs []string
	for i := range 12 {
		agg := fmt.Sprintf("agg-%d", i)
		if fake.PartitionOf([]byte(agg)) == silent {
			silentAggs = append(silentAggs, agg)
		} else {
			healthyAggs = append(healthyAggs, agg)
		}
	}
	if len(silentAggs) == 0 || len(healthyAggs) == 0 {
		t.Fatalf("aggregates %v on the silent partition, %v elsewhere: want some of each", silentAggs, healthyAggs)
	}
	fake.SetSilent(&silent)

	// Two events per aggregate, each in its own transaction, the silent partition's
	// first in each round: every healthy event commits after a parked one, so a slot
	// confirmed past the parked events would show.
	// firstParkedEnd is past the end of the first parked event's transaction: the slot
	// must stay before it. (Not before its start: a keepalive may confirm a position in
	// the middle of a transaction not yet streamed, which the server sends again after
	// a restart all the same.)
	var firstParkedEnd int64
	w := parkedWorld{byAggregate: map[string][]uuid.UUID{}}
	for range 2 {
		for _, agg := range append(append([]string{}, silentAggs...), healthyAggs...) {
			id := b.insertEvent(t, agg)
			if firstParkedEnd == 0 {
				firstParkedEnd = b.currentLSN(t)
			}
			w.byAggregate[agg] = append(w.byAggregate[agg], id)
			if fake.PartitionOf([]byte(agg)) == silent {
				w.silentIDs = append(w.silentIDs, id)
			} else {
				w.healthyIDs = append(w.healthyIDs, id)
			}
		}
	}

	testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
		got := b.count(t, `SELECT count(*) FROM outbox_published WHERE id = ANY($1)`, w.healthyIDs)
		return got == len(w.healthyIDs), fmt.Sprintf("%d of the %d events of the answering partitions published while partition %d is silent",
			got, len(w.healthyIDs), silent)
	})
	// The rows say why they wait (GET /payments/{id} shows last_error): the prober
	// notes the events parked unsent at its next turn.
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		got := b.count(t, `SELECT count(*) FROM outbox_events
			WHERE id = ANY($1) AND status = 'pending' AND last_error LIKE 'parked%partition 0%'`, w.silentIDs)
		return got == len(w.silentIDs), fmt.Sprintf("%d of the %d events of the silent partition pending with a last_error naming it, want all",
			got, len(w.silentIDs))
	})
	if got := relay.metric(t, "outbox_cdc_parked_events", ""); got == 0 {
		t.Errorf("outbox_cdc_parked_events = 0 while partition %d is silent", silent)
	}
	// The relay reports its position every StatusInterval: over several of them, the
	// slot stays behind the parked events.
	holdsFor(t, 4*b.cfg.StatusInterval, func() (bool, string) {
		got := b.confirmedLSN(t)
		return got < firstParkedEnd, fmt.Sprintf("slot confirmed to %d, past %d, the end of the first parked event's transaction", got, firstParkedEnd)
	})
	return w
}

// insertEvent commits one event of aggregate, in a transaction of its own.
func (b *testBundle) insertEvent(t *testing.T, aggregate string) uuid.UUID {
	t.Helper()
	msg := outbox.Message{ID: uuid.New(), Type: "TestEvent", AggregateID: aggregate, Payload: []byte(`{}`), OccurredAt: time.Now()}
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		return outbox.Insert(context.Background(), tx, msg)
	})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	return msg.ID
}

// currentLSN is the server's current WAL insert position, as a number: past the end of
// every transaction committed before.
func (b *testBundle) currentLSN(t *testing.T) int64 {
	t.Helper()
	return int64(b.count(t, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint`))
}

// holdsFor checks cond every 50ms for d, and fails the test the first time it is false.
func holdsFor(t *testing.T, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok, state := cond(); !ok {
			t.Fatal(state)
		}
		<-ticker.C
	}
}
