package outbox

import (
	"context"
	"slices"
	"testing"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The cleaner deletes from a history that holds 30 days of published events. This test
// grows a history of 50,000 published events and checks, with EXPLAIN, that the
// cleaner's DELETE reaches its rows through the index built for it
// (migrations/payments) instead of scanning the table: that is what keeps cleanup
// cheap however long the history.
func TestCleanupPlanUsesItsIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `
		INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, published_at)
		SELECT gen_random_uuid(), i, 'TestEvent', 'agg-' || i, '{}', 0, 0, at, at
		FROM generate_series(1, 50000) AS i,
		     -- Steady state: published over the last 29 days, and the few rows that
		     -- crossed the 30-day horizon since the cleaner's last pass.
		     LATERAL (SELECT CASE WHEN i <= 50 THEN now() - interval '31 days'
		                          ELSE now() - make_interval(mins => (50000 - i) % (29 * 24 * 60)) END AS at) t
		ORDER BY at`); err != nil {
		t.Fatalf("grow the history: %v", err)
	}
	if _, err := b.pool.Exec(ctx, `ANALYZE outbox_events, outbox_published`); err != nil {
		t.Fatal(err)
	}
	indexes, seqScans, plan := testenv.PlanAccess(t, b.pool, deletePublishedSQL, 720*3600.0, 1000)
	for _, want := range []string{"outbox_published_published_at_idx"} {
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
