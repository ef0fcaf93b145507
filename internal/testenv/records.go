package testenv

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// PaymentRecord is the record the relay writes for a PaymentCreated of payment
// paymentID, with event id eventID, for topic.
func PaymentRecord(t *testing.T, topic string, paymentID, eventID uuid.UUID) *kgo.Record {
	t.Helper()
	createdAt := time.Date(2026, 11, 30, 9, 15, 42, 0, time.UTC)
	payload, err := json.Marshal(event.PaymentCreated{PaymentID: paymentID, UserID: "u-42", Amount: 1999, Currency: "EUR", CreatedAt: createdAt})
	if err != nil {
		t.Fatalf("encode payload: %v", err)
	}
	env := event.Envelope{ID: eventID, Type: event.TypePaymentCreated, Key: paymentID.String(), OccurredAt: createdAt, Payload: payload}
	return env.Record(topic, createdAt)
}
