package antifraud

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// TestTotalsLockedInKeyOrder holds the lock of u-2's totals while a transaction moves the
// totals of u-3 (a new payment), u-1 and u-2 (refunds): taking the rows in key order, it
// must hold u-1 and wait for u-2, without having touched u-3. Two consumers taking rows in
// any other order could each hold what the other waits for: a deadlock. Adding before
// subtracting, each statement in key order, would take u-3 first.
func TestTotalsLockedInKeyOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()
	b.exec(t, `INSERT INTO user_totals (user_id, currency, payment_count, amount_total)
		VALUES ('u-1', 'EUR', 1, 1000), ('u-2', 'EUR', 1, 1000), ('u-3', 'EUR', 1, 1000)`)
	var applied []paymentEvent
	for _, user := range []string{"u-3", "u-1", "u-2"} {
		p := newPayment(user, 1000, time.Now())
		r := eventRecord(t, uuid.New(), p)
		if user != "u-3" {
			r = transitionRecord(t, event.TypePaymentRefunded, p, 3, 100)
		}
		ev, poison := decodeRecord(r)
		if poison != nil {
			t.Fatalf("decode event: %v", poison)
		}
		applied = append(applied, ev)
	}

	holder, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT 1 FROM user_totals WHERE user_id = 'u-2' FOR UPDATE`); err != nil {
		t.Fatalf("lock u-2: %v", err)
	}

	mover, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer mover.Rollback(ctx)
	pid := mover.Conn().PgConn().PID()
	done := make(chan error, 1)
	go func() { done <- moveTotals(ctx, mover, applied) }()
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid)
		return n == 1, "the moving transaction does not wait for a lock yet"
	})

	locked := func(user string) bool {
		_, err := b.pool.Exec(ctx, `SELECT 1 FROM user_totals WHERE user_id = $1 FOR UPDATE NOWAIT`, user)
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "55P03" {
			return true
		} else if err != nil {
			t.Fatalf("try to lock %s: %v", user, err)
		}
		return false
	}
	if !locked("u-1") {
		t.Error("u-1 not locked while u-2 is awaited, want it taken first")
	}
	if locked("u-3") {
		t.Error("u-3 locked while u-2 is awaited, want it taken after u-2")
	}

	if err := holder.Rollback(ctx); err != nil {
		t.Fatalf("release u-2: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("moveTotals: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("moveTotals still waiting 10s after u-2 was released")
	}
	if err := mover.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	// 3 x 1000, one payment of 1000 more, two refunds of 100.
	if n := b.count(t, `SELECT sum(amount_total)::bigint FROM user_totals`); n != 3800 {
		t.Errorf("sum of the totals = %d, want 3800", n)
	}
}
