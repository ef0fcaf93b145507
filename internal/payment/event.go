package payment

import (
	"time"

	"github.com/google/uuid"
)

// EventTypePaymentCreated is the outbox event type, sent as the X-Event-Type header.
const EventTypePaymentCreated = "PaymentCreated"

// PaymentCreated is version 1 of the event's wire format: the JSON value of the Kafka
// record. Other programs (the antifraud consumer, students' consumers) decode it, so
// it is pinned by testdata/payment_created_v1.json: a change that breaks the golden
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

// NewPaymentCreated is the event that announces p.
func NewPaymentCreated(p Payment) PaymentCreated {
	return PaymentCreated{
		PaymentID: p.ID,
		UserID:    p.UserID,
		Amount:    p.Amount,
		Currency:  p.Currency,
		CreatedAt: p.CreatedAt.UTC(),
	}
}
