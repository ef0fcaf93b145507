package verify

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dscourse/payments-outbox/internal/event"
)

// The payloads of docs/contract.md, as the verifier checks them: every field of the
// type's v1 present and not null, and the values the API would have written. Unknown
// fields are allowed, as v1 consumers must ignore them.

// requiredFields are the fields of each event type's v1 payload, all required
// (docs/examples/*_v1.json).
var requiredFields = map[string][]string{
	event.TypePaymentCreated:   {"payment_id", "user_id", "amount", "currency", "created_at"},
	event.TypePaymentCaptured:  {"payment_id", "sequence", "user_id", "amount", "currency", "captured_at"},
	event.TypePaymentRefunded:  {"payment_id", "sequence", "refund_id", "user_id", "amount", "currency", "refunded_total", "refunded_at"},
	event.TypePaymentCancelled: {"payment_id", "sequence", "user_id", "amount", "currency", "cancelled_at"},
}

// A decodedPayload is what the verifier reads from a valid payload.
type decodedPayload struct {
	PaymentID string
	// Sequence is the payload's, or 1 for PaymentCreated (which has none).
	Sequence int
	// Fields are the payment's fields as the payload repeats them; for a refund the
	// amount is the refund's.
	Fields PaymentFields
}

// lifecyclePayload has the fields every event type shares, under their v1 names.
type lifecyclePayload struct {
	PaymentID string `json:"payment_id"`
	Sequence  int    `json:"sequence"`
	UserID    string `json:"user_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
}

// decodePayload decodes a record value as the v1 payload of typ and says what is wrong
// with it, if anything: not JSON, a field missing or of the wrong type, or a value the
// API would never have written.
func decodePayload(typ string, value []byte) (decodedPayload, string) {
	// JSON text is UTF-8 (RFC 8259), and encoding/json would decode invalid bytes
	// silently as U+FFFD.
	if !utf8.Valid(value) {
		return decodedPayload{}, "value is not UTF-8"
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(value, &present); err != nil {
		return decodedPayload{}, fmt.Sprintf("value is not a JSON object: %v", err)
	}
	var missing []string
	for _, field := range requiredFields[typ] {
		if v, ok := present[field]; !ok || string(v) == "null" {
			missing = append(missing, field)
		}
	}
	if len(missing) > 0 {
		return decodedPayload{}, typ + " payload without " + strings.Join(missing, ", ")
	}
	var err error
	var p lifecyclePayload
	if typ == event.TypePaymentCreated {
		var created event.PaymentCreated
		err = json.Unmarshal(value, &created)
		p = lifecyclePayload{PaymentID: created.PaymentID.String(), Sequence: event.CreatedSequence,
			UserID: created.UserID, Amount: created.Amount, Currency: created.Currency}
	} else {
		err = decodeTransitionPayload(typ, value, &p)
	}
	if err != nil {
		return decodedPayload{}, fmt.Sprintf("payload is not a %s v1: %v", typ, err)
	}
	switch {
	case p.UserID == "":
		return decodedPayload{}, "payload with an empty user_id"
	case p.Amount <= 0:
		return decodedPayload{}, fmt.Sprintf("payload with amount %d, want a positive amount in minor units", p.Amount)
	case len(p.Currency) != 3:
		return decodedPayload{}, fmt.Sprintf("payload with currency %q, want an ISO 4217 code", p.Currency)
	case p.Sequence < event.CreatedSequence || (typ != event.TypePaymentCreated && p.Sequence == event.CreatedSequence):
		return decodedPayload{}, fmt.Sprintf("%s payload with sequence %d, want 1 for a creation and more for what follows", typ, p.Sequence)
	}
	return decodedPayload{PaymentID: p.PaymentID, Sequence: p.Sequence,
		Fields: PaymentFields{UserID: p.UserID, Amount: p.Amount, Currency: p.Currency}}, ""
}

// decodeTransitionPayload decodes the typed v1 payload, so that a field of the wrong type
// (a time that is no RFC 3339, an id that is no UUID) is refused, and keeps what the
// lifecycle payloads share.
func decodeTransitionPayload(typ string, value []byte, p *lifecyclePayload) error {
	var typed any
	switch typ {
	case event.TypePaymentCaptured:
		typed = new(event.PaymentCaptured)
	case event.TypePaymentRefunded:
		typed = new(event.PaymentRefunded)
	default:
		typed = new(event.PaymentCancelled)
	}
	if err := json.Unmarshal(value, typed); err != nil {
		return err
	}
	return json.Unmarshal(value, p)
}
