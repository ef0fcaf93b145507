package antifraud

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/payment"
)

// Poison reasons: the values of the reason label of antifraud_poison_total and of
// consumer_dead_letters.reason. A fixed, small set, so the metric keeps few series.
const (
	PoisonMissingEventID    = "missing_event_id"
	PoisonInvalidEventID    = "invalid_event_id"
	PoisonUnknownEventType  = "unknown_event_type"
	PoisonInvalidOccurredAt = "invalid_occurred_at"
	PoisonInvalidPayload    = "invalid_payload"
)

// A PoisonError says why a record can never be processed, however often it is retried.
type PoisonError struct {
	// Reason is one of the Poison* codes.
	Reason string
	// Detail is the human-readable cause, e.g. the JSON error.
	Detail string
}

func (e *PoisonError) Error() string { return e.Reason + ": " + e.Detail }

// An event is a PaymentCreated record that passed every check.
type event struct {
	id         uuid.UUID
	occurredAt time.Time
	payload    payment.PaymentCreated
	record     *kgo.Record
}

// decodeRecord checks a record against the event contract. A record that fails here fails
// the same way on every redelivery, so retrying it would only stall its partition: the
// error is a *PoisonError, never a transient one.
func decodeRecord(r *kgo.Record) (event, *PoisonError) {
	headers := lastHeaderValues(r)

	rawID, ok := headers[outbox.HeaderEventID]
	if !ok || rawID == "" {
		return event{}, &PoisonError{PoisonMissingEventID, "no " + outbox.HeaderEventID + " header"}
	}
	id, err := uuid.Parse(rawID)
	if err != nil {
		return event{}, &PoisonError{PoisonInvalidEventID, fmt.Sprintf("%s %q: %v", outbox.HeaderEventID, rawID, err)}
	}
	if typ := headers[outbox.HeaderEventType]; typ != payment.EventTypePaymentCreated {
		return event{}, &PoisonError{PoisonUnknownEventType, fmt.Sprintf("%s %q, want %q", outbox.HeaderEventType, typ, payment.EventTypePaymentCreated)}
	}
	occurredAt, err := time.Parse(time.RFC3339Nano, headers[outbox.HeaderOccurredAt])
	if err != nil {
		return event{}, &PoisonError{PoisonInvalidOccurredAt, fmt.Sprintf("%s: %v", outbox.HeaderOccurredAt, err)}
	}

	// Unknown fields are accepted: a producer may add fields to v1 without breaking us.
	var p payment.PaymentCreated
	if err := json.Unmarshal(r.Value, &p); err != nil {
		return event{}, &PoisonError{PoisonInvalidPayload, fmt.Sprintf("decode JSON: %v", err)}
	}
	if err := validPayment(p); err != nil {
		return event{}, &PoisonError{PoisonInvalidPayload, err.Error()}
	}
	return event{id: id, occurredAt: occurredAt, payload: p, record: r}, nil
}

// validPayment checks what the rules and the decisions table rely on.
func validPayment(p payment.PaymentCreated) error {
	var errs []error
	if p.PaymentID == uuid.Nil {
		errs = append(errs, errors.New("payment_id is missing"))
	}
	if p.UserID == "" {
		errs = append(errs, errors.New("user_id is missing"))
	}
	if p.Amount <= 0 {
		errs = append(errs, fmt.Errorf("amount is %d, want > 0", p.Amount))
	}
	if len(p.Currency) != 3 {
		errs = append(errs, fmt.Errorf("currency %q, want a 3-letter ISO 4217 code", p.Currency))
	}
	if p.CreatedAt.IsZero() {
		errs = append(errs, errors.New("created_at is missing"))
	}
	return errors.Join(errs...)
}

// lastHeaderValues returns the record's headers as a map; for a repeated key the last
// value wins, as in most Kafka clients' "last header" lookups.
func lastHeaderValues(r *kgo.Record) map[string]string {
	m := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}
