package payment

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// Keys older than the retention go, younger ones stay, in both key tables; payments
// stay. After the purge the key is free: the same request makes a new payment.
func TestKeyCleanerDeletesExpiredKeys(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t, migrations.Payments)
	store := NewTracedStore(pool, nil)
	ctx := t.Context()
	req := CreateRequest{UserID: "u-1", Amount: 100, Currency: "EUR"}
	old, err := store.Create(ctx, merchant.DefaultID, req, "old-key")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := store.Transition(ctx, TransitionRequest{MerchantID: merchant.DefaultID, PaymentID: old.Payment.ID, Action: ActionCapture}, "old-capture"); err != nil {
		t.Fatalf("capture: %v", err)
	}
	if _, err := store.Create(ctx, merchant.DefaultID, req, "young-key"); err != nil {
		t.Fatalf("create: %v", err)
	}
	// The old keys are 90 minutes old; the retention is one hour.
	for _, table := range []string{"idempotency_keys", "transition_keys"} {
		if _, err := pool.Exec(ctx, `UPDATE `+table+` SET created_at = now() - interval '90 minutes' WHERE key LIKE 'old-%'`); err != nil {
			t.Fatalf("age %s: %v", table, err)
		}
	}
	cleaner, err := NewKeyCleaner(pool, KeyCleanerConfig{Retention: time.Hour, Interval: 20 * time.Millisecond, BatchSize: 1},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { cleaner.Run(runCtx); close(done) }()
	t.Cleanup(func() { stop(); <-done })

	keys := func() (string, int) {
		var left string
		var payments int
		err := pool.QueryRow(ctx, `SELECT
			coalesce((SELECT string_agg(key, ',' ORDER BY key) FROM (SELECT key FROM idempotency_keys UNION ALL SELECT key FROM transition_keys) k), ''),
			(SELECT count(*) FROM payments)`).Scan(&left, &payments)
		if err != nil {
			t.Fatalf("read keys: %v", err)
		}
		return left, payments
	}
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		left, _ := keys()
		return left == "young-key", "keys left: " + left + ", want young-key"
	})
	if _, payments := keys(); payments != 2 {
		t.Errorf("payments = %d after the purge, want 2 (only keys are deleted)", payments)
	}
	again, err := store.Create(ctx, merchant.DefaultID, req, "old-key")
	if err != nil || again.Replayed || again.Payment.ID == old.Payment.ID || again.Payment.ID == uuid.Nil {
		t.Errorf("the purged key again: %+v, %v; want a new payment", again, err)
	}
}
