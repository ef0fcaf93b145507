package payment_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/payment"
)

// The event carries every field of the payment, with the creation time in UTC as the
// contract promises, whatever zone the payment's time is in.
func TestNewPaymentCreatedCarriesThePayment(t *testing.T) {
	t.Parallel()
	createdAt := time.Date(2026, 11, 30, 9, 15, 42, 123456000, time.UTC)
	p := payment.Payment{
		ID:        uuid.MustParse("01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10"),
		UserID:    "u-42",
		Amount:    1999,
		Currency:  "EUR",
		CreatedAt: createdAt.In(time.FixedZone("CET", 3600)),
	}
	want := event.PaymentCreated{
		PaymentID: p.ID,
		UserID:    "u-42",
		Amount:    1999,
		Currency:  "EUR",
		CreatedAt: createdAt,
	}
	got := payment.NewPaymentCreated(p)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("NewPaymentCreated (-want +got):\n%s", diff)
	}
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("created_at location = %s, want UTC", got.CreatedAt.Location())
	}
}
