package antifraud

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// TestProgressReadAfterTheConsumerAtWork plays a rebalance: one consumer has applied a
// payment's capture (its progress saved in the decision row, not committed yet) when
// another, now owning the partition, reads the payment's progress for the refund. The
// second must wait for the first and then read the capture it committed: reading the
// progress before, or as it was before the wait, would park the refund behind a capture
// that was applied already, for good.
func TestProgressReadAfterTheConsumerAtWork(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()
	p := newPayment("u-1", 1000, time.Now())
	// The payment's creation, applied and committed earlier.
	if _, err := b.pool.Exec(ctx, `INSERT INTO decisions (payment_id, event_id, user_id, amount, currency, decision, occurred_at)
		VALUES ($1, $2, 'u-1', 1000, 'EUR', 'approve', now())`, p.PaymentID, uuid.New()); err != nil {
		t.Fatalf("insert the creation's decision: %v", err)
	}
	capture, poison := decodeRecord(transitionRecord(t, event.TypePaymentCaptured, p, 2, 1000))
	if poison != nil {
		t.Fatalf("decode capture: %v", poison)
	}
	refund, poison := decodeRecord(transitionRecord(t, event.TypePaymentRefunded, p, 3, 100))
	if poison != nil {
		t.Fatalf("decode refund: %v", poison)
	}

	atWork, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer atWork.Rollback(ctx)
	known, err := selectProgress(ctx, atWork, []paymentEvent{capture})
	if err != nil {
		t.Fatalf("select progress: %v", err)
	}
	if got := known[p.PaymentID].sequence; got != 1 {
		t.Fatalf("progress before the capture = %d, want 1 (the creation)", got)
	}
	next := progress{sequence: 2, lastType: event.TypePaymentCaptured, eventID: capture.id}
	if err := saveProgress(ctx, atWork, map[uuid.UUID]progress{p.PaymentID: next}); err != nil {
		t.Fatalf("save progress: %v", err)
	}

	takingOver, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer takingOver.Rollback(ctx)
	pid := takingOver.Conn().PgConn().PID()
	read := make(chan map[uuid.UUID]progress, 1)
	go func() {
		known, err := selectProgress(ctx, takingOver, []paymentEvent{refund})
		if err != nil {
			t.Errorf("select progress: %v", err)
		}
		read <- known
	}()
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid)
		return n == 1, "the consumer taking over does not wait for the payment's lock"
	})
	if err := atWork.Commit(ctx); err != nil {
		t.Fatalf("commit the capture: %v", err)
	}
	select {
	case known := <-read:
		if got := known[p.PaymentID]; got != next {
			t.Errorf("progress read after the wait = %+v, want the committed capture %+v", got, next)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("selectProgress still waiting 10s after the capture committed")
	}
}
