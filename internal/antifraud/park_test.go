package antifraud

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// An event whose predecessor has not arrived yet (a replayed event the relay sends after
// its successor, or a partition's records out of order) is parked, not marked processed:
// a dedup row must never stand for an effect that was not applied. When the predecessor
// arrives, the parked event is applied right after it, once, however often it was
// delivered meanwhile, and the totals end exact.
func TestEventParkedUntilItsPredecessorArrives(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	c := b.newConsumer(t, b.config())
	ctx := context.Background()
	p := newPayment("u-1", 2000, time.Now())
	created := eventRecord(t, uuid.New(), p)
	captured := transitionRecord(t, event.TypePaymentCaptured, p, 2, 0)
	refund := transitionRecord(t, event.TypePaymentRefunded, p, 3, 500)
	secondRefund := transitionRecord(t, event.TypePaymentRefunded, p, 4, 300)

	// The refunds come before the capture, one twice.
	processInTurn(t, b, c, []*kgo.Record{created}, []*kgo.Record{refund, secondRefund}, []*kgo.Record{refund})
	if n := b.count(t, "SELECT count(*) FROM processed_events WHERE sequence > 1"); n != 0 {
		t.Errorf("%d dedup rows for events not applied, want 0", n)
	}
	if got := testutil.ToFloat64(c.metrics.parked); got != 2 {
		t.Errorf("antifraud_parked_events = %v, want 2 (a redelivery parks nothing twice)", got)
	}
	res, err := c.processBatch(ctx, b.positioned(copyRecord(captured)))
	if err != nil {
		t.Fatalf("processBatch: %v", err)
	}
	c.observe(res)

	want := map[totalKey]Total{{"u-1", "EUR"}: {Payments: 1, Amount: 2000 - 500 - 300}}
	if diff := cmp.Diff(want, b.totals(t), cmp.AllowUnexported(totalKey{})); diff != "" {
		t.Errorf("user totals (-want +got):\n%s", diff)
	}
	if n := b.count(t, "SELECT coalesce(last_sequence, 1) FROM decisions WHERE payment_id = $1", p.PaymentID); n != 4 {
		t.Errorf("progress = %d, want 4: the parked refunds applied after the capture", n)
	}
	if n := b.count(t, "SELECT count(*) FROM order_violations"); n != 0 {
		t.Errorf("order violations = %d, want 0", n)
	}
	if n := b.count(t, `SELECT count(*) FROM (
		SELECT sequence, lag(sequence) OVER (PARTITION BY payment_id ORDER BY processed_order) AS before
		FROM processed_events) s WHERE s.sequence <> coalesce(s.before, 0) + 1`); n != 0 {
		t.Errorf("%d dedup rows out of sequence in processed_order, want 0", n)
	}

	if got := testutil.ToFloat64(c.metrics.parked); got != 0 {
		t.Errorf("antifraud_parked_events = %v after the capture, want 0", got)
	}
	if n := b.count(t, "SELECT count(*) FROM parked_events"); n != 0 {
		t.Errorf("parked events left = %d, want 0", n)
	}

	// Delivered again after it was applied: a duplicate, absorbed.
	if _, err := c.processBatch(ctx, b.positioned(copyRecord(refund))); err != nil {
		t.Fatalf("processBatch: %v", err)
	}
	if diff := cmp.Diff(want, b.totals(t), cmp.AllowUnexported(totalKey{})); diff != "" {
		t.Errorf("user totals after a redelivery (-want +got):\n%s", diff)
	}
}

// A parked event can come again in the batch that brings its predecessor (a relay
// publishing it again, in order this time): the batch applies that delivery after the
// predecessor, and the parked one is then the same event, done, not an event out of
// order. It leaves the table without an order violation, and is applied once.
func TestParkedEventRedeliveredWithItsPredecessor(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	c := b.newConsumer(t, b.config())
	p := newPayment("u-1", 2000, time.Now())
	created := eventRecord(t, uuid.New(), p)
	captured := transitionRecord(t, event.TypePaymentCaptured, p, 2, 0)
	refund := transitionRecord(t, event.TypePaymentRefunded, p, 3, 500)

	processInTurn(t, b, c, []*kgo.Record{created}, []*kgo.Record{refund}, []*kgo.Record{captured, refund})
	if n := b.count(t, "SELECT count(*) FROM order_violations"); n != 0 {
		t.Errorf("order violations = %d, want 0: the parked refund is the refund the batch applied", n)
	}
	if n := b.count(t, "SELECT count(*) FROM parked_events"); n != 0 {
		t.Errorf("parked events left = %d, want 0", n)
	}
	if n := b.count(t, "SELECT coalesce(last_sequence, 1) FROM decisions WHERE payment_id = $1", p.PaymentID); n != 3 {
		t.Errorf("progress = %d, want 3", n)
	}
	want := map[totalKey]Total{{"u-1", "EUR"}: {Payments: 1, Amount: 2000 - 500}}
	if diff := cmp.Diff(want, b.totals(t), cmp.AllowUnexported(totalKey{})); diff != "" {
		t.Errorf("user totals (-want +got):\n%s", diff)
	}
}

// processInTurn processes a batch of copies of each list of records in turn, and counts
// each batch's outcome as the consumer's loop does.
func processInTurn(t *testing.T, b *bundle, c *Consumer, batches ...[]*kgo.Record) {
	t.Helper()
	for _, batch := range batches {
		var send []*kgo.Record
		for _, r := range batch {
			send = append(send, copyRecord(r))
		}
		res, err := c.processBatch(context.Background(), b.positioned(send...))
		if err != nil {
			t.Fatalf("processBatch: %v", err)
		}
		c.observe(res)
	}
}
