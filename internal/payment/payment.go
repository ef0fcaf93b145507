// Package payment is the payments domain: validation of a payment request, the one
// transaction that writes a payment together with its outbox event, and the HTTP
// handlers of /payments.
//
// The package never talks to Kafka. It writes the PaymentCreated event into the
// outbox table in the same transaction as the payment; the relay (package outbox)
// publishes it after the commit. That is what keeps the API available whatever Kafka
// does, and what makes "payment without event" and "event without payment" impossible.
package payment

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/event"
)

// A CreateRequest is a validated request to create a payment.
type CreateRequest struct {
	// UserID identifies the paying user: 1 to 64 visible ASCII characters, no spaces
	// (validateUserID says why).
	UserID string
	// Amount is in the currency's minor unit (cents for EUR), always > 0. Money is never
	// a float.
	Amount int64
	// Currency is an active ISO 4217 code in upper case, e.g. "EUR".
	Currency string
}

// Validate reports the first invalid field as an *Error with code Invalid.
func (r CreateRequest) Validate() error {
	if err := validateUserID(r.UserID); err != nil {
		return err
	}
	if r.Amount <= 0 {
		return Errorf(Invalid, "amount", "amount must be a positive integer in minor units (e.g. 1999 for 19.99), got %d", r.Amount)
	}
	if !isCurrency(r.Currency) {
		return Errorf(Invalid, "currency", "currency must be an active ISO 4217 code in upper case, e.g. EUR; got %q", r.Currency)
	}
	return nil
}

// validateUserID applies the contract's one rule for user ids (event.ValidateUserID
// says what it is and why) as an error naming the field.
func validateUserID(id string) error {
	if err := event.ValidateUserID(id); err != nil {
		return Errorf(Invalid, "user_id", "user_id %v", err)
	}
	return nil
}

// A Payment is an accepted payment.
type Payment struct {
	ID        uuid.UUID
	UserID    string
	Amount    int64
	Currency  string
	CreatedAt time.Time
	// Status is one of the State* constants.
	Status string
	// Version numbers the payment's transitions: 1 after creation, +1 per capture,
	// refund or cancellation. The event of a transition carries it as its sequence.
	Version int
	// RefundedAmount is the sum of the payment's refunds, never above Amount.
	RefundedAmount int64
	// UpdatedAt is when the last transition after creation happened; nil before it.
	UpdatedAt *time.Time
}

// An EventDelivery is the delivery state of one of a payment's events in the outbox:
// what GET /payments/{id} reports about it. The event itself is in package event.
type EventDelivery struct {
	// ID is the event id, sent to Kafka as the X-Event-Id header.
	ID uuid.UUID
	// Type is the event type, e.g. PaymentCaptured.
	Type string
	// Sequence is the payment's transition number the event announces (1 for
	// PaymentCreated).
	Sequence int
	// Status is pending, published or failed (moved to the dead-letter queue).
	Status string
	// Attempts counts the failed publish attempts so far.
	Attempts int
	// PublishedAt is set once the broker acknowledged the event.
	PublishedAt *time.Time
	// LastError is the error of the last failed attempt, if any.
	LastError *string
}

// A Created is the outcome of Store.Create.
type Created struct {
	Payment Payment
	// EventID is the id of the PaymentCreated event; uuid.Nil if the event row was
	// already cleaned up when an old Idempotency-Key was replayed.
	EventID uuid.UUID
	// Replayed is true when an earlier request with the same Idempotency-Key created
	// the payment and this one only read it back.
	Replayed bool
}

// NewPayment stamps a request with a fresh id and the time now, as stored. Exported for
// the teaching dual-write handler, which must create payments the same way.
func NewPayment(req CreateRequest, now time.Time) (Payment, error) {
	// UUIDv7 ids start with a timestamp, so new rows land at the right edge of the
	// primary-key index instead of at random pages.
	id, err := uuid.NewV7()
	if err != nil {
		return Payment{}, fmt.Errorf("new payment id: %w", err)
	}
	return Payment{
		ID:       id,
		UserID:   req.UserID,
		Amount:   req.Amount,
		Currency: req.Currency,
		// PostgreSQL keeps microseconds: truncating here makes the value we answer with
		// and put in the event equal to the one a later GET reads back.
		CreatedAt: now.UTC().Truncate(time.Microsecond),
		Status:    StateCreated,
		Version:   event.CreatedSequence,
	}, nil
}
