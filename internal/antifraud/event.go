package antifraud

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// Poison reasons: the values of the reason label of antifraud_poison_total and of
// consumer_dead_letters.reason. A fixed, small set, so the metric keeps few series: what
// varies from record to record goes into the detail, never into the reason.
const (
	PoisonMissingEventID    = "missing_event_id"
	PoisonInvalidEventID    = "invalid_event_id"
	PoisonUnknownEventType  = "unknown_event_type"
	PoisonInvalidOccurredAt = "invalid_occurred_at"
	// PoisonInvalidPayload covers a value that is not JSON, not UTF-8, or whose fields
	// break the contract (docs/contract.md), e.g. a NUL character in user_id.
	PoisonInvalidPayload = "invalid_payload"
	// PoisonInvalidKey is a record whose key is not its payload's payment id: not a
	// record of our producer, and one that may not share a partition with the other
	// events of its payment.
	PoisonInvalidKey = "invalid_key"
	// PoisonStoreFailed is a record that passed every check above and that the database
	// still refused, on its own, for a reason about the data (see isolate.go). It means
	// decodeRecord misses a check: a bug of ours, to fix there.
	PoisonStoreFailed = "store_failed"
)

// poisonReasons is every reason there is, for tests that the label set stays fixed.
var poisonReasons = []string{
	PoisonMissingEventID, PoisonInvalidEventID, PoisonUnknownEventType, PoisonInvalidOccurredAt,
	PoisonInvalidPayload, PoisonInvalidKey, PoisonStoreFailed,
}

// A PoisonError says why a record can never be processed, however often it is retried.
type PoisonError struct {
	// Reason is one of the Poison* codes.
	Reason string
	// Detail is the human-readable cause, e.g. the JSON error.
	Detail string
}

func (e *PoisonError) Error() string { return e.Reason + ": " + e.Detail }

// A paymentEvent is a record of a payment's lifecycle that passed every check.
type paymentEvent struct {
	id         uuid.UUID
	typ        string // one of event.Types
	occurredAt time.Time
	// payload is the PaymentCreated of a creation. For a later event it holds the
	// payment's fields the event repeats (payment_id, user_id, currency, and its own
	// amount), created_at left zero: only creations are decided.
	payload event.PaymentCreated
	// sequence is the event's place in its payment's lifecycle: 1 for PaymentCreated.
	sequence int
	record   *kgo.Record
}

// decodeRecord checks a record against the event contract. A record that fails here fails
// the same way on every redelivery, so retrying it would only stall its partition: the
// error is a *PoisonError, never a transient one.
//
// Anyone who can write to the topic can send anything, so the checks cover what the
// database would refuse too: a record that passes must be storable. Otherwise the batch
// fails inside PostgreSQL on every attempt and the partition stalls after all.
func decodeRecord(r *kgo.Record) (paymentEvent, *PoisonError) {
	envelope, headerErr := event.FromRecord(r)
	if headerErr != nil {
		return paymentEvent{}, headerPoison(headerErr)
	}
	if !slices.Contains(event.Types, envelope.Type) {
		return paymentEvent{}, &PoisonError{PoisonUnknownEventType, fmt.Sprintf("%s %q, want one of %s", event.HeaderType, envelope.Type, strings.Join(event.Types, ", "))}
	}
	// JSON is UTF-8 (RFC 8259), and encoding/json would silently replace invalid bytes
	// with U+FFFD: two different user ids could then count as one user.
	if !utf8.Valid(envelope.Payload) {
		return paymentEvent{}, &PoisonError{PoisonInvalidPayload, "value is not UTF-8"}
	}
	ev := paymentEvent{id: envelope.ID, typ: envelope.Type, occurredAt: envelope.OccurredAt, record: r}
	// Unknown fields are accepted: a producer may add fields to v1 without breaking us.
	var err error
	if envelope.Type == event.TypePaymentCreated {
		err = json.Unmarshal(envelope.Payload, &ev.payload)
		ev.sequence = event.CreatedSequence
	} else {
		ev.payload, ev.sequence, err = decodeTransition(envelope.Type, envelope.Payload)
	}
	if err != nil {
		return paymentEvent{}, &PoisonError{PoisonInvalidPayload, fmt.Sprintf("decode JSON: %v", err)}
	}
	if err := validPayment(ev); err != nil {
		return paymentEvent{}, &PoisonError{PoisonInvalidPayload, err.Error()}
	}
	if key, err := uuid.ParseBytes(r.Key); err != nil || key != ev.payload.PaymentID {
		return paymentEvent{}, &PoisonError{PoisonInvalidKey, fmt.Sprintf("key %q, want the payment id %s", truncate(r.Key, 64), ev.payload.PaymentID)}
	}
	return ev, nil
}

// decodeTransition decodes the payload of a PaymentCaptured, PaymentRefunded or
// PaymentCancelled v1 into the payment fields it repeats, its own amount, and its
// sequence. The event time checked is the payload's own (captured_at and so on).
func decodeTransition(typ string, payload []byte) (event.PaymentCreated, int, error) {
	var (
		p        event.PaymentCreated
		sequence int
		at       time.Time
		err      error
	)
	switch typ {
	case event.TypePaymentCaptured:
		var e event.PaymentCaptured
		err = json.Unmarshal(payload, &e)
		p, sequence, at = event.PaymentCreated{PaymentID: e.PaymentID, UserID: e.UserID, Amount: e.Amount, Currency: e.Currency}, e.Sequence, e.CapturedAt
	case event.TypePaymentRefunded:
		var e event.PaymentRefunded
		err = json.Unmarshal(payload, &e)
		p, sequence, at = event.PaymentCreated{PaymentID: e.PaymentID, UserID: e.UserID, Amount: e.Amount, Currency: e.Currency}, e.Sequence, e.RefundedAt
	case event.TypePaymentCancelled:
		var e event.PaymentCancelled
		err = json.Unmarshal(payload, &e)
		p, sequence, at = event.PaymentCreated{PaymentID: e.PaymentID, UserID: e.UserID, Amount: e.Amount, Currency: e.Currency}, e.Sequence, e.CancelledAt
	}
	if err != nil {
		return p, 0, err
	}
	if at.IsZero() {
		return p, 0, fmt.Errorf("%s without its time", typ)
	}
	if sequence <= event.CreatedSequence {
		return p, 0, fmt.Errorf("%s with sequence %d, want > %d (the PaymentCreated is %d)", typ, sequence, event.CreatedSequence, event.CreatedSequence)
	}
	return p, sequence, nil
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

// validPayment checks what the rules, the totals and the decisions table rely on.
func validPayment(ev paymentEvent) error {
	p := ev.payload
	var errs []error
	if p.PaymentID == uuid.Nil {
		errs = append(errs, errors.New("payment_id is missing"))
	}
	if err := event.ValidateUserID(p.UserID); err != nil {
		errs = append(errs, fmt.Errorf("user_id %q %w", truncate([]byte(p.UserID), 2*event.MaxUserIDLength), err))
	}
	if p.Amount <= 0 {
		errs = append(errs, fmt.Errorf("amount is %d, want > 0", p.Amount))
	}
	if !validCurrency(p.Currency) {
		errs = append(errs, fmt.Errorf("currency %q, want a 3-letter ISO 4217 code in upper case", truncate([]byte(p.Currency), 16)))
	}
	if ev.typ == event.TypePaymentCreated && p.CreatedAt.IsZero() {
		errs = append(errs, errors.New("created_at is missing"))
	}
	return errors.Join(errs...)
}

// validCurrency accepts the shape of an ISO 4217 code, three letters A to Z; which codes
// are in circulation is the API's business.
func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for i := range len(c) {
		if c[i] < 'A' || c[i] > 'Z' {
			return false
		}
	}
	return true
}

// truncate shortens what a hostile record carried before it goes into a detail, so that
// a megabyte of header does not become a megabyte of log line. %q then escapes whatever
// it holds.
func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
