package outbox

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

func TestCleanerDeletesOnlyPublishedRowsPastRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// name -> (status, age of created_at and published_at)
	rows := []struct {
		name, status string
		age          time.Duration
	}{
		{"old-published-1", "published", 40 * 24 * time.Hour},
		{"old-published-2", "published", 31 * 24 * time.Hour},
		{"old-published-3", "published", 31 * 24 * time.Hour},
		{"recent-published", "published", 29 * 24 * time.Hour},
		{"old-pending", "pending", 40 * 24 * time.Hour},
		{"old-failed", "failed", 40 * 24 * time.Hour},
	}
	for _, r := range rows {
		b.insert(t, newMessage(t, r.name, 0))
		if r.status == "published" {
			b.movePublished(t, r.name, r.age)
			continue
		}
		_, err := b.pool.Exec(ctx, `
			UPDATE outbox_events SET status = $2, created_at = now() - make_interval(secs => $3)
			WHERE aggregate_id = $1`, r.name, r.status, r.age.Seconds())
		if err != nil {
			t.Fatal(err)
		}
	}
	// Batches of 2 make the cleaner loop: 3 expired rows take two DELETEs.
	c, err := NewCleaner(b.pool, CleanerConfig{Retention: 720 * time.Hour, BatchSize: 2}, b.logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := c.runOnce(ctx)
	if err != nil || deleted != 3 {
		t.Errorf("runOnce: deleted %d, %v; want 3, nil", deleted, err)
	}
	left, err := b.pool.Query(ctx, `SELECT aggregate_id FROM outbox_events UNION ALL SELECT aggregate_id FROM outbox_published`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(left, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"old-failed", "old-pending", "recent-published"}, got); diff != "" {
		t.Errorf("rows left (-want +got):\n%s", diff)
	}
}

// Run cleans on its schedule, not only once at start: a row that is still within the
// retention when Run starts (its first pass keeps it) expires a second later and is
// deleted by a later tick; Run returns when its context ends.
func TestCleanerRunKeepsCleaningOnSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t, newMessage(t, "expires-soon", 0))
	b.movePublished(t, "expires-soon", 0)
	c, err := NewCleaner(b.pool, CleanerConfig{Retention: time.Second, Interval: 50 * time.Millisecond}, b.logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()

	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		if n := b.count(t, `SELECT count(*) FROM outbox_published`); n != 0 {
			return false, fmt.Sprintf("%d rows left, want the row deleted by a tick after it expired", n)
		}
		return true, ""
	})
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after its context ended")
	}
}
