package cdc

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The stream can carry a commit a moment before other sessions see its row. An event
// of an aggregate whose earlier event is in the DLQ goes to the DLQ behind it; if its
// row is not visible yet, the move touches nothing, and the event must not be taken for
// dead-lettered already: it would be neither published nor in the DLQ, and the slot
// would be confirmed past it. The move is retried until the row shows. The uncommitted
// transaction is the test's stand-in for that moment.
func TestHoldBackWaitsForARowNotYetVisible(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r, err := NewRelay(b.pool, b.cfg, b.logger, newTestMetrics(t))
	if err != nil {
		t.Fatal(err)
	}
	first := b.insert(t, "pay", 1)[0] // aggregate pay-0
	if moved, err := r.deadLetter(ctx, first, "poison"); err != nil || !moved {
		t.Fatalf("dead-letter the first event: moved %v, err %v", moved, err)
	}

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after the commit, a no-op
	second := outboxEvent{ID: uuid.New(), Type: "TestEvent", AggregateID: "pay-0", Payload: []byte(`{}`), CreatedAt: time.Now()}
	if err := tx.QueryRow(ctx, `INSERT INTO outbox_events (id, event_type, aggregate_id, payload)
		VALUES ($1, 'TestEvent', 'pay-0', '{}') RETURNING seq`, second.ID).Scan(&second.Seq); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	time.AfterFunc(300*time.Millisecond, func() { committed <- tx.Commit(ctx) })

	holdCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := r.holdBack(holdCtx, []outboxEvent{second})
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("holdBack: %v", err)
	}
	if len(out) != 0 {
		t.Errorf("holdBack returned %d events to publish, want none: the aggregate is blocked", len(out))
	}
	status := b.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'failed'`, second.ID)
	dlq := b.count(t, `SELECT count(*) FROM outbox_dlq WHERE event_id = $1`, second.ID)
	if status != 1 || dlq != 1 {
		t.Errorf("held-back event: %d failed rows, %d DLQ rows, want 1 and 1: it was dropped, neither published nor dead-lettered", status, dlq)
	}
}

// A row that never shows (the insert rolled back, or a bug) must not be dropped
// either: holdBack fails when its ctx ends, so that nothing after it is confirmed and
// the next session streams it again.
func TestHoldBackFailsRatherThanDropAnEventItCannotFind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r, err := NewRelay(b.pool, b.cfg, b.logger, newTestMetrics(t))
	if err != nil {
		t.Fatal(err)
	}
	first := b.insert(t, "pay", 1)[0]
	if moved, err := r.deadLetter(ctx, first, "poison"); err != nil || !moved {
		t.Fatalf("dead-letter the first event: moved %v, err %v", moved, err)
	}
	ghost := outboxEvent{ID: uuid.New(), Seq: 1 << 40, Type: "TestEvent", AggregateID: "pay-0", Payload: []byte(`{}`), CreatedAt: time.Now()}
	holdCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	out, err := r.holdBack(holdCtx, []outboxEvent{ghost})
	if err == nil {
		t.Errorf("holdBack of an event whose row it cannot find returned %d events and no error, want an error", len(out))
	}
}
