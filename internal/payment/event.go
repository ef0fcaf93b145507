package payment

import "github.com/dscourse/payments-outbox/internal/event"

// NewPaymentCreated is the event that announces p. Its wire format belongs to package
// event, which consumers import without linking this package.
func NewPaymentCreated(p Payment) event.PaymentCreated {
	return event.PaymentCreated{
		PaymentID: p.ID,
		UserID:    p.UserID,
		Amount:    p.Amount,
		Currency:  p.Currency,
		CreatedAt: p.CreatedAt.UTC(),
	}
}
