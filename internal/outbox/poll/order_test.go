package poll

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

// Insert records whether an earlier event of the aggregate was still in the outbox, and
// the claim checks the order rule only for the events that answer yes
// (migrations/payments/00010). An event written while its predecessor is in another
// worker's batch, or dead-lettered, must wait for it; an event with nothing before it is
// claimable at once.
func TestClaimKeepsAnEventBehindItsPredecessorWhereverThatIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newRelay(t)
	ctx := context.Background()

	first := newMessage(t, "in-flight", 0)
	b.insert(t, first)
	inFlight, got, err := r.store.claim(ctx, r.cfg.Lease, 1)
	if err != nil || len(got) != 1 || got[0].ID != first.ID {
		t.Fatalf("first claim: %d events, %v; want the first event", len(got), err)
	}
	t.Cleanup(func() { rollback(inFlight) })

	behindInFlight := newMessage(t, "in-flight", 1) // its predecessor sits in the batch above
	deadLettered := newMessage(t, "dead-lettered", 0)
	b.insert(t, behindInFlight, deadLettered)
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_events SET status = 'failed' WHERE id = $1`, deadLettered.ID); err != nil {
		t.Fatal(err)
	}
	behindDead := newMessage(t, "dead-lettered", 1)
	alone := newMessage(t, "alone", 0)
	b.insert(t, behindDead, alone)

	wantFlags := map[uuid.UUID]bool{first.ID: false, behindInFlight.ID: true, deadLettered.ID: false,
		behindDead.ID: true, alone.ID: false}
	if got := b.mayHavePredecessor(t); !cmp.Equal(got, wantFlags) {
		t.Errorf("may_have_predecessor per event (-want +got):\n%s", cmp.Diff(wantFlags, got))
	}
	if got := b.claimIDs(t, r); !cmp.Equal(got, []uuid.UUID{alone.ID}) {
		t.Errorf("second claim while the first event's batch is open = %v, want only %v (the event with nothing before it)",
			got, alone.ID)
	}

	// The first event is published: the one behind it becomes claimable, and the one
	// behind the dead letter still waits.
	if _, err := r.record(ctx, inFlight, got, nil); err != nil {
		t.Fatalf("record the first batch: %v", err)
	}
	if got := b.claimIDs(t, r); !cmp.Equal(got, []uuid.UUID{behindInFlight.ID, alone.ID}) {
		t.Errorf("claim after the first event was published = %v, want %v", got, []uuid.UUID{behindInFlight.ID, alone.ID})
	}

	// A later event of an aggregate whose events were all published has nothing before it.
	after := newMessage(t, "in-flight", 2)
	if _, err := b.pool.Exec(ctx, `DELETE FROM outbox_events WHERE id = $1`, behindInFlight.ID); err != nil {
		t.Fatal(err)
	}
	b.insert(t, after)
	if got := b.mayHavePredecessor(t)[after.ID]; got {
		t.Error("may_have_predecessor of an event written after its aggregate's others left the outbox = true, want false")
	}
}

// claimIDs claims one batch, rolls it back and returns its event ids in claim order.
func (b *testBundle) claimIDs(t *testing.T, r *Relay) []uuid.UUID {
	t.Helper()
	tx, claimed, err := r.store.claim(context.Background(), r.cfg.Lease, 100)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if tx != nil {
		rollback(tx)
	}
	var ids []uuid.UUID
	for _, e := range claimed {
		ids = append(ids, e.ID)
	}
	return ids
}

func (b *testBundle) mayHavePredecessor(t *testing.T) map[uuid.UUID]bool {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT id, may_have_predecessor FROM outbox_events`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	flags := map[uuid.UUID]bool{}
	for rows.Next() {
		var id uuid.UUID
		var flag bool
		if err := rows.Scan(&id, &flag); err != nil {
			t.Fatal(err)
		}
		flags[id] = flag
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return flags
}
