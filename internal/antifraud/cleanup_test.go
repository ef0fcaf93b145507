package antifraud

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

func TestCleanerDeletesOnlyExpiredRowsInBatches(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t, migrations.Antifraud)
	ctx := context.Background()
	insert := func(age time.Duration) uuid.UUID {
		id := uuid.New()
		_, err := pool.Exec(ctx, `
			INSERT INTO processed_events (event_id, payment_id, topic, partition, "offset", processed_at)
			VALUES ($1, $2, 't', 0, 0, now() - make_interval(secs => $3))`, id, uuid.New(), age.Seconds())
		if err != nil {
			t.Fatalf("insert processed event: %v", err)
		}
		return id
	}
	const retention = 90 * 24 * time.Hour
	for range 5 {
		insert(retention + time.Hour)
	}
	kept := []uuid.UUID{insert(retention - time.Hour), insert(time.Minute)}

	c, err := NewCleaner(pool, CleanerConfig{Retention: retention, BatchSize: 2}, discardLogger())
	if err != nil {
		t.Fatalf("NewCleaner: %v", err)
	}
	deleted, err := c.runOnce(ctx)
	if err != nil {
		t.Fatalf("runOnce: %v", err)
	}
	if deleted != 5 {
		t.Errorf("runOnce deleted %d rows, want 5 (in batches of 2)", deleted)
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM processed_events WHERE event_id = ANY($1)", kept).Scan(&left); err != nil {
		t.Fatalf("count kept rows: %v", err)
	}
	if left != len(kept) {
		t.Errorf("rows younger than the retention left = %d, want %d", left, len(kept))
	}
}

func TestCleanerRejectsShortRetention(t *testing.T) {
	t.Parallel()
	if err := (CleanerConfig{Retention: time.Hour}).Validate(); err == nil {
		t.Error("Validate with a 1h retention = nil, want an error")
	}
	if err := (CleanerConfig{}).Validate(); err != nil {
		t.Errorf("Validate with defaults = %v, want nil", err)
	}
}
