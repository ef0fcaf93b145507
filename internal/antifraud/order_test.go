package antifraud

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

func TestOrderViolation(t *testing.T) {
	t.Parallel()
	created := progress{sequence: 1, lastType: event.TypePaymentCreated}
	captured := progress{sequence: 2, lastType: event.TypePaymentCaptured}
	refunded := progress{sequence: 3, lastType: event.TypePaymentRefunded}
	cancelled := progress{sequence: 2, lastType: event.TypePaymentCancelled}
	ev := func(typ string, sequence int) paymentEvent { return paymentEvent{typ: typ, sequence: sequence} }
	tests := []struct {
		name  string
		after progress
		ev    paymentEvent
		want  string
	}{
		{"creation first", progress{}, ev(event.TypePaymentCreated, 1), ""},
		{"capture after creation", created, ev(event.TypePaymentCaptured, 2), ""},
		{"cancel after creation", created, ev(event.TypePaymentCancelled, 2), ""},
		{"refund after capture", captured, ev(event.TypePaymentRefunded, 3), ""},
		{"refund after refund", refunded, ev(event.TypePaymentRefunded, 4), ""},
		{"capture before creation", progress{}, ev(event.TypePaymentCaptured, 2), OrderMissingPredecessor},
		{"refund skipping the capture", created, ev(event.TypePaymentRefunded, 3), OrderMissingPredecessor},
		{"second creation, new id", created, ev(event.TypePaymentCreated, 1), OrderOutOfOrder},
		{"capture after a refund", refunded, ev(event.TypePaymentCaptured, 2), OrderOutOfOrder},
		{"refund after cancel", cancelled, ev(event.TypePaymentRefunded, 3), OrderInvalidTransition},
		{"refund right after creation", created, ev(event.TypePaymentRefunded, 2), OrderInvalidTransition},
		{"cancel after capture", captured, ev(event.TypePaymentCancelled, 3), OrderInvalidTransition},
	}
	for _, tt := range tests {
		if got := orderViolation(tt.after, tt.ev); got != tt.want {
			t.Errorf("%s: orderViolation = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// transitionRecord is the record the relay would publish for a later event of p.
func transitionRecord(t *testing.T, typ string, p event.PaymentCreated, sequence int, amount int64) *kgo.Record {
	t.Helper()
	at := p.CreatedAt.Add(time.Duration(sequence) * time.Second)
	var payload any
	switch typ {
	case event.TypePaymentCaptured:
		payload = event.PaymentCaptured{PaymentID: p.PaymentID, Sequence: sequence, UserID: p.UserID, Amount: p.Amount, Currency: p.Currency, CapturedAt: at}
	case event.TypePaymentRefunded:
		payload = event.PaymentRefunded{PaymentID: p.PaymentID, Sequence: sequence, RefundID: uuid.New(), UserID: p.UserID, Amount: amount, Currency: p.Currency, RefundedTotal: amount, RefundedAt: at}
	case event.TypePaymentCancelled:
		payload = event.PaymentCancelled{PaymentID: p.PaymentID, Sequence: sequence, UserID: p.UserID, Amount: p.Amount, Currency: p.Currency, CancelledAt: at}
	}
	value, err := json.Marshal(payload)
	if err != nil {
		t.Fatalf("encode %s: %v", typ, err)
	}
	return event.Envelope{ID: uuid.New(), Type: typ, Key: p.PaymentID.String(), OccurredAt: at, Payload: value}.Record("", time.Now())
}

// copyRecord is what a relay publishing r again would send.
func copyRecord(r *kgo.Record) *kgo.Record {
	return &kgo.Record{Key: r.Key, Value: r.Value, Headers: r.Headers}
}

// A payment's lifecycle through real Kafka: refunds and a cancellation lower the user's
// totals, each once however often it is delivered, and the progress follows.
func TestLifecycleAdjustsTotalsExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	r := b.start(t, b.config())

	kept := newPayment("u-1", 1999, time.Now())
	cancelled := newPayment("u-1", 700, time.Now())
	refund := transitionRecord(t, event.TypePaymentRefunded, kept, 3, 500)
	b.produce(t,
		eventRecord(t, uuid.New(), kept),
		eventRecord(t, uuid.New(), cancelled),
		transitionRecord(t, event.TypePaymentCaptured, kept, 2, 0),
		transitionRecord(t, event.TypePaymentCancelled, cancelled, 2, 0),
		refund,
		transitionRecord(t, event.TypePaymentRefunded, kept, 4, 1000),
	)
	// Redelivered twice, as after a relay crash. A produced record keeps its context, so
	// each copy is a record of its own.
	b.produce(t, copyRecord(refund), copyRecord(refund))
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, "SELECT coalesce(sum(deliveries), 0) FROM processed_events")
		return n == 8, fmt.Sprintf("%d of 8 deliveries", n)
	})

	want := map[totalKey]Total{{"u-1", "EUR"}: {Payments: 1, Amount: 1999 - 500 - 1000}}
	if diff := cmp.Diff(want, b.totals(t), cmp.AllowUnexported(totalKey{})); diff != "" {
		t.Errorf("user totals mismatch (-want +got):\n%s", diff)
	}
	if n := b.count(t, "SELECT coalesce(last_sequence, 1) FROM decisions WHERE payment_id = $1", kept.PaymentID); n != 4 {
		t.Errorf("progress of the refunded payment = %d, want 4", n)
	}
	if n := b.count(t, "SELECT count(*) FROM order_violations"); n != 0 {
		t.Errorf("order violations = %d, want 0", n)
	}
	if n := b.count(t, "SELECT count(*) FROM decisions"); n != 2 {
		t.Errorf("decisions = %d, want 2 (one per creation)", n)
	}
	// processed_order is the order the events were taken in, and each payment's
	// sequences come out in that order.
	if n := b.count(t, `SELECT count(*) FROM (
		SELECT sequence, lag(sequence) OVER (PARTITION BY payment_id ORDER BY processed_order) AS before
		FROM processed_events) s WHERE s.sequence <> coalesce(s.before, 0) + 1`); n != 0 {
		t.Errorf("%d dedup rows out of sequence in processed_order, want 0", n)
	}
	if err := r.stop(t); err != nil {
		t.Fatalf("consumer: %v", err)
	}
}

// Events that do not follow their payment's last applied one are recorded and counted,
// never applied, and do not stop the partition; those whose predecessor has not come
// yet are parked instead (park.go), and applied once it does.
func TestOutOfOrderEventsAreRecordedNotApplied(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	c := b.newConsumer(t, b.config())
	early := newPayment("u-1", 1000, time.Now())
	twice := newPayment("u-2", 2000, time.Now())
	voided := newPayment("u-3", 3000, time.Now())
	records := b.positioned(
		transitionRecord(t, event.TypePaymentCaptured, early, 2, 0), // before its creation: parked, then applied
		eventRecord(t, uuid.New(), early),
		eventRecord(t, uuid.New(), twice),
		transitionRecord(t, event.TypePaymentCaptured, twice, 2, 0),
		transitionRecord(t, event.TypePaymentCaptured, twice, 2, 0), // a second capture, new id
		eventRecord(t, uuid.New(), voided),
		transitionRecord(t, event.TypePaymentCancelled, voided, 2, 0),
		transitionRecord(t, event.TypePaymentRefunded, voided, 3, 100), // refund of a cancelled payment
		transitionRecord(t, event.TypePaymentRefunded, twice, 5, 100),  // sequence 3 and 4 missing: parked
	)
	res, err := c.processBatch(context.Background(), records)
	if err != nil {
		t.Fatalf("processBatch: %v", err)
	}
	c.observe(res)

	type row struct {
		Offset int64
		Reason string
	}
	rows, err := b.pool.Query(context.Background(), `SELECT "offset", reason FROM order_violations ORDER BY "offset"`)
	if err != nil {
		t.Fatalf("select violations: %v", err)
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.Offset, &r.Reason); err != nil {
			t.Fatalf("scan: %v", err)
		}
		got = append(got, r)
	}
	want := []row{{4, OrderOutOfOrder}, {7, OrderInvalidTransition}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("order violations (-want +got):\n%s", diff)
	}
	for reason, n := range map[string]float64{OrderMissingPredecessor: 0, OrderOutOfOrder: 1, OrderInvalidTransition: 1} {
		if m := testutil.ToFloat64(c.metrics.orderViolations.WithLabelValues(reason)); m != n {
			t.Errorf("antifraud_order_violations_total{reason=%q} = %v, want %v", reason, m, n)
		}
	}
	// Only the events in order changed the totals: the cancellation took u-3's payment
	// out, the refunds did nothing.
	wantTotals := map[totalKey]Total{{"u-1", "EUR"}: {1, 1000}, {"u-2", "EUR"}: {1, 2000}, {"u-3", "EUR"}: {0, 0}}
	if diff := cmp.Diff(wantTotals, b.totals(t), cmp.AllowUnexported(totalKey{})); diff != "" {
		t.Errorf("user totals mismatch (-want +got):\n%s", diff)
	}
	if n := b.count(t, "SELECT coalesce(last_sequence, 1) FROM decisions WHERE payment_id = $1", early.PaymentID); n != 2 {
		t.Errorf("progress of the payment captured too early = %d, want 2 (the capture applied after its creation)", n)
	}
	if n := b.count(t, "SELECT count(*) FROM parked_events"); n != 1 {
		t.Errorf("parked events = %d, want 1 (the refund whose predecessors never came)", n)
	}
	// A redelivery of the batch is absorbed: nothing recorded twice, nothing applied.
	if _, err := c.processBatch(context.Background(), records); err != nil {
		t.Fatalf("second processBatch: %v", err)
	}
	if n := b.count(t, "SELECT count(*) FROM order_violations"); n != 2 {
		t.Errorf("violations after a redelivery = %d, want 2", n)
	}
	if n := b.count(t, "SELECT count(*) FROM parked_events"); n != 1 {
		t.Errorf("parked events after a redelivery = %d, want 1", n)
	}
	if diff := cmp.Diff(wantTotals, b.totals(t), cmp.AllowUnexported(totalKey{})); diff != "" {
		t.Errorf("user totals after a redelivery (-want +got):\n%s", diff)
	}
}
