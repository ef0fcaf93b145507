package antifraud

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// Poison reasons: the values of the reason label of antifraud_poison_total and of
// consumer_dead_letters.reason. A fixed, small set, so the metric keeps few series.
const (
	PoisonMissingEventID    = "missing_event_id"
	PoisonInvalidEventID    = "invalid_event_id"
	PoisonUnknownEventType  = "unknown_event_type"
	PoisonInvalidOccurredAt = "invalid_occurred_at"
	PoisonInvalidPayload    = "invalid_payload"
	PoisonInvalidKey        = "invalid_key"
	PoisonStoreFailed       = "store_failed"
)

// A PoisonError says why a record can never be processed, however often it is retried.
type PoisonError struct {
	// Reason is one of the Poison* codes.
	Reason string
	// Detail is the human-readable cause, e.g. the JSON error.
	Detail string
}

func (e *PoisonError) Error() string { return e.Reason + ": " + e.Detail }

// A paymentEvent is a PaymentCreated record that passed every check.
type paymentEvent struct {
	id         uuid.UUID
	occurredAt time.Time
	payload    event.PaymentCreated
	record     *kgo.Record
}

// decodeRecord checks a record against the event contract. A record that fails here fails
// the same way on every redelivery, so retrying it would only stall its partition: the
// error is a *PoisonError, never a transient one.
func decodeRecord(r *kgo.Record) (paymentEvent, *PoisonError) {
	envelope, headerErr := event.FromRecord(r)
	if headerErr != nil {
		return paymentEvent{}, headerPoison(headerErr)
	}
	if envelope.Type != event.TypePaymentCreated {
		return paymentEvent{}, &PoisonError{PoisonUnknownEventType, fmt.Sprintf("%s %q, want %q", event.HeaderType, envelope.Type, event.TypePaymentCreated)}
	}

	// Unknown fields are accepted: a producer may add fields to v1 without breaking us.
	var p event.PaymentCreated
	if err := json.Unmarshal(envelope.Payload, &p); err != nil {
		return paymentEvent{}, &PoisonError{PoisonInvalidPayload, fmt.Sprintf("decode JSON: %v", err)}
	}
	if err := validPayment(p); err != nil {
		return paymentEvent{}, &PoisonError{PoisonInvalidPayload, err.Error()}
	}
	return paymentEvent{id: envelope.ID, occurredAt: envelope.OccurredAt, payload: p, record: r}, nil
}

// headerPoison names the poison reason of an envelope that event.FromRecord refused. A
// missing type is an unknown one: the record cannot be routed to any decoder.
func headerPoison(err *event.HeaderError) *PoisonError {
	var reason string
	switch {
	case err.Header == event.HeaderID && err.Value == "":
		reason = PoisonMissingEventID
	case err.Header == event.HeaderID:
		reason = PoisonInvalidEventID
	case err.Header == event.HeaderType:
		reason = PoisonUnknownEventType
	default:
		reason = PoisonInvalidOccurredAt
	}
	return &PoisonError{reason, err.Error()}
}

// validPayment checks what the rules and the decisions table rely on.
func validPayment(p event.PaymentCreated) error {
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
