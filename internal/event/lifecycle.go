package event

import (
	"time"

	"github.com/google/uuid"
)

// The events of a payment after its creation (docs/adr/0006-payment-lifecycle.md). Each
// carries the payment's sequence number: PaymentCreated is 1, and every later transition
// of the payment is the next number, so a consumer that last applied n must see n+1 next.
const (
	// TypePaymentCaptured: the authorised amount was captured; payload PaymentCaptured.
	TypePaymentCaptured = "PaymentCaptured"
	// TypePaymentRefunded: part or all of the captured amount was refunded; payload
	// PaymentRefunded, one event per refund.
	TypePaymentRefunded = "PaymentRefunded"
	// TypePaymentCancelled: the authorisation was released before any capture; payload
	// PaymentCancelled.
	TypePaymentCancelled = "PaymentCancelled"
)

// CreatedSequence is the sequence number of a payment's PaymentCreated event, which
// carries none (its v1 predates the lifecycle).
const CreatedSequence = 1

// Types lists every event type of the topic in lifecycle order.
var Types = []string{TypePaymentCreated, TypePaymentCaptured, TypePaymentRefunded, TypePaymentCancelled}

// PaymentCaptured is version 1 of the capture event's payload, pinned by
// docs/examples/payment_captured_v1.json.
type PaymentCaptured struct {
	PaymentID uuid.UUID `json:"payment_id"`
	// Sequence is the payment's transition number: 2 for a capture.
	Sequence int    `json:"sequence"`
	UserID   string `json:"user_id"`
	// Amount is the captured amount in minor units: the whole payment (no partial capture).
	Amount     int64     `json:"amount"`
	Currency   string    `json:"currency"`
	CapturedAt time.Time `json:"captured_at"`
}

// PaymentRefunded is version 1 of the refund event's payload, pinned by
// docs/examples/payment_refunded_v1.json. A payment may have several.
type PaymentRefunded struct {
	PaymentID uuid.UUID `json:"payment_id"`
	Sequence  int       `json:"sequence"`
	// RefundID identifies this refund; two refunds of the same amount have two ids.
	RefundID uuid.UUID `json:"refund_id"`
	UserID   string    `json:"user_id"`
	// Amount is this refund's amount in minor units.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// RefundedTotal is the sum of the payment's refunds, this one included; it equals
	// the payment's amount when the payment is fully refunded.
	RefundedTotal int64     `json:"refunded_total"`
	RefundedAt    time.Time `json:"refunded_at"`
}

// PaymentCancelled is version 1 of the cancellation event's payload, pinned by
// docs/examples/payment_cancelled_v1.json.
type PaymentCancelled struct {
	PaymentID uuid.UUID `json:"payment_id"`
	// Sequence is 2: only a payment that was never captured can be cancelled.
	Sequence int    `json:"sequence"`
	UserID   string `json:"user_id"`
	// Amount is the released authorisation, the payment's amount.
	Amount      int64     `json:"amount"`
	Currency    string    `json:"currency"`
	CancelledAt time.Time `json:"cancelled_at"`
}
