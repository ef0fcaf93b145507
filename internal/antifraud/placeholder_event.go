package antifraud

// TEMPORARY: a local copy of payment.PaymentCreated until internal/payment/event.go lands.
// Delete this file and import internal/payment instead.

import (
	"time"

	"github.com/google/uuid"
)

type paymentCreated struct {
	PaymentID uuid.UUID `json:"payment_id"`
	UserID    string    `json:"user_id"`
	Amount    int64     `json:"amount"`
	Currency  string    `json:"currency"`
	CreatedAt time.Time `json:"created_at"`
}

const eventTypePaymentCreated = "PaymentCreated"
