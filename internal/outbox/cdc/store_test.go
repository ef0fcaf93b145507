package cdc

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The stream can carry a commit a moment before other sessions see it. An uncommitted
// row is invisible in the same way: the mark must keep trying until the commit shows,
// not leave the event pending for good. An event that is nowhere to be found is
// returned unmarked once ctx ends, so that the stream moves on.
func TestMarkPublishedWaitsForACommitNotYetVisible(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after the commit, a no-op
	id := uuid.New()
	if _, err := tx.Exec(ctx, `INSERT INTO outbox_events (id, event_type, aggregate_id, payload) VALUES ($1, 'TestEvent', 'agg', '{}')`, id); err != nil {
		t.Fatal(err)
	}
	// Later than the first move, which then finds nothing; the wait is the test's
	// stand-in for the server's moment, not a wait for the code under test.
	committed := make(chan error, 1)
	time.AfterFunc(300*time.Millisecond, func() { committed <- tx.Commit(ctx) })

	markCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	unmarked, err := store{pool: b.pool}.markPublished(markCtx, []uuid.UUID{id})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if len(unmarked) != 0 {
		t.Errorf("unmarked = %v, want none", unmarked)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_published WHERE id = $1`, id); got != 1 {
		t.Errorf("event in outbox_published %d times, want 1: the mark gave up before the commit showed", got)
	}

	missing := uuid.New()
	shortCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	unmarked, err = store{pool: b.pool}.markPublished(shortCtx, []uuid.UUID{id, missing})
	if err != nil {
		t.Fatal(err)
	}
	if len(unmarked) != 1 || unmarked[0] != missing {
		t.Errorf("unmarked = %v, want only the missing event %s (the other is moved already)", unmarked, missing)
	}
}
