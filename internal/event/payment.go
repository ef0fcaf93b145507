package event

import (
	"time"

	"github.com/google/uuid"
)

// The event types of a payment's lifecycle, sent as the X-Event-Type header. Each has
// one payload type below and one golden file per version in docs/examples/.
const (
	// TypePaymentCreated announces an accepted payment; its payload is PaymentCreated.
	TypePaymentCreated = "PaymentCreated"
)

// PaymentCreated is version 1 of the event's payload: the JSON value of the Kafka
// record. Other programs (the antifraud consumer, students' consumers) decode it, so
// it is pinned by docs/examples/payment_created_v1.json: a change that breaks the golden
// file is a breaking change and needs a new event version, not an edit.
type PaymentCreated struct {
	PaymentID uuid.UUID `json:"payment_id"`
	UserID    string    `json:"user_id"`
	// Amount is in the currency's minor unit, as in the API.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// CreatedAt is RFC 3339 in UTC with up to microsecond precision.
	CreatedAt time.Time `json:"created_at"`
}
