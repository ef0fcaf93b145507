package cdc

import "testing"

// The order between batches in flight: a batch waits for exactly the earlier batches,
// not yet marked, that hold an event of one of its aggregates.
func TestBatchOrderWaitsForEarlierBatchesOfTheSameAggregates(t *testing.T) {
	t.Parallel()
	o := newBatchOrder()
	gates := map[int]*batchGate{}
	// handOff hands off a batch n of events of aggregates aggs and returns the gates it
	// waits for; waitsFor tells whether they are exactly those of batches.
	handOff := func(n int, aggs ...string) []<-chan struct{} {
		for _, agg := range aggs {
			o.add(outboxEvent{AggregateID: agg})
		}
		gate, after := o.next()
		gates[n] = gate
		o.handOff(n)
		return after
	}
	waitsFor := func(after []<-chan struct{}, batches ...int) bool {
		if len(after) != len(batches) {
			return false
		}
		for _, n := range batches {
			found := false
			for _, ch := range after {
				found = found || ch == (<-chan struct{})(gates[n].published)
			}
			if !found {
				return false
			}
		}
		return true
	}

	if after := handOff(0, "a", "b", "a"); !waitsFor(after) {
		t.Fatalf("batch 0 waits for %d batches, want none", len(after))
	}
	if after := handOff(1, "c"); !waitsFor(after) {
		t.Fatalf("batch 1 (aggregate c only) waits for %d batches, want none", len(after))
	}
	if after := handOff(2, "a", "c", "d"); !waitsFor(after, 0, 1) {
		t.Fatalf("batch 2 (a, c, d) waits for %d batches, want batches 0 and 1", len(after))
	}
	if after := handOff(3, "b", "a"); !waitsFor(after, 0, 2) {
		t.Fatalf("batch 3 (b, a) waits for %d batches, want 0 (b) and 2 (a's latest)", len(after))
	}
	o.marked(0)
	o.marked(2)
	if after := handOff(4, "a", "b"); !waitsFor(after, 3) {
		t.Fatalf("batch 4 (a, b) waits for %d batches, want batch 3 only (0 and 2 are marked)", len(after))
	}
	o.marked(1)
	o.marked(3)
	o.marked(4)
	if len(o.latest) != 0 || len(o.byBatch) != 0 {
		t.Fatalf("after every batch is marked, the order still holds %d aggregates and %d batches, want none", len(o.latest), len(o.byBatch))
	}
}
