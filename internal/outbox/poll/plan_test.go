package poll

import (
	"context"
	"slices"
	"testing"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The relay polls a backlog. This test grows a backlog of 50,000 pending events and
// checks, with EXPLAIN, that the claim reaches its rows through the indexes built for
// it (migrations/payments) instead of scanning a table: that is what keeps polling
// cheap however large the backlog gets.
func TestClaimPlanUsesItsIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload)
		SELECT gen_random_uuid(), 'TestEvent', 'backlog-' || i, '{}'
		FROM generate_series(1, 50000) AS i`); err != nil {
		t.Fatalf("grow the backlog: %v", err)
	}
	if _, err := b.pool.Exec(ctx, `ANALYZE outbox_events, outbox_published`); err != nil {
		t.Fatal(err)
	}
	indexes, seqScans, plan := testenv.PlanAccess(t, b.pool, ClaimSQL, 1000)
	for _, want := range []string{"outbox_events_pending_idx", "outbox_events_aggregate_idx"} {
		if !slices.Contains(indexes, want) {
			t.Errorf("plan uses indexes %v, want %s among them\n%s", indexes, want, plan)
		}
	}
	for _, table := range []string{"outbox_events", "outbox_published"} {
		if slices.Contains(seqScans, table) {
			t.Errorf("plan scans %s sequentially, want index access only\n%s", table, plan)
		}
	}
}
