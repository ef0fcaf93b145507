package cdc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

// The parking lot's bookkeeping on its own: one head per aggregate, in the order the
// aggregates were parked; an aggregate's next event only once its head leaves; a batch
// done only once its mark and every parked event of it are; and a full lot makes the
// publisher wait.
func TestParkingLotKeepsOrderBatchesAndItsBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lot := newParkingLot(3)
	ev := func(agg string) outboxEvent { return outboxEvent{ID: uuid.New(), AggregateID: agg} }
	a1, b1, a2 := ev("a"), ev("b"), ev("a")
	lot.expect(0)
	lot.expect(1)
	for _, p := range []struct {
		e     outboxEvent
		batch int
	}{{a1, 0}, {b1, 0}, {a2, 1}} {
		if err := lot.park(ctx, p.e, p.batch, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	heads := func() []uuid.UUID { return parkedIDs(lot.heads(time.Now(), 10)) }
	if diff := cmp.Diff([]uuid.UUID{a1.ID, b1.ID}, heads()); diff != "" {
		t.Errorf("heads (-want +got):\n%s", diff)
	}
	if !lot.holds("a") || lot.holds("c") {
		t.Errorf("holds(a) = %v, holds(c) = %v; want true, false", lot.holds("a"), lot.holds("c"))
	}

	// Full: the next park waits for room.
	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := lot.park(waitCtx, ev("d"), 1, 0, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("park into a full lot: %v, want it to wait until its context ends", err)
	}

	if lot.finish(0) {
		t.Errorf("batch 0 done with two parked events left")
	}
	first := lot.heads(time.Now(), 10)
	if lot.leave(first[0]) { // a1
		t.Errorf("batch 0 done with b1 still parked")
	}
	// a keeps its place (the aggregate parked first), now with its second event.
	if diff := cmp.Diff([]uuid.UUID{a2.ID, b1.ID}, heads()); diff != "" {
		t.Errorf("heads after a1 left (-want +got):\n%s", diff)
	}
	if !lot.leave(first[1]) { // b1
		t.Errorf("batch 0 not done after its mark and both its parked events")
	}
	if lot.finish(1) {
		t.Errorf("batch 1 done with a2 still parked")
	}
	if !lot.leave(lot.heads(time.Now(), 10)[0]) || lot.size() != 0 || lot.holds("a") {
		t.Errorf("after a2 left: batch 1 not done, or %d events still parked", lot.size())
	}
}
