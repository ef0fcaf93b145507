package hostile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// hostileKinds are the records another producer could write to the topic that no
// consumer may decide, one builder each (docs/adr/0004, "Records another producer can
// write"). Each is about a payment nobody committed, so a consumer that decided it
// instead of dead-lettering it shows as a phantom decision too.
var hostileKinds = []struct {
	kind  string
	build func(now time.Time) *kgo.Record
}{
	{"wrong_json_types", func(now time.Time) *kgo.Record {
		id := uuid.New()
		return hostileRecord(id, now, fmt.Appendf(nil, `{"payment_id":%q,"user_id":42,"amount":"100","currency":["EUR"],"created_at":true}`, id))
	}},
	{"not_json", func(now time.Time) *kgo.Record {
		return hostileRecord(uuid.New(), now, []byte("\x00\x01 not JSON {"))
	}},
	{"nul_in_user_id", func(now time.Time) *kgo.Record {
		return hostileRecord(uuid.New(), now, hostilePayload(uuid.Nil, "user\x00one", "EUR", now))
	}},
	{"nul_in_currency", func(now time.Time) *kgo.Record {
		return hostileRecord(uuid.New(), now, hostilePayload(uuid.Nil, "hostile-user", "E\x00R", now))
	}},
	{"invalid_utf8", func(now time.Time) *kgo.Record {
		// encoding/json would replace the invalid bytes, so they are put in by hand.
		valid := hostilePayload(uuid.Nil, "hostile-user", "EUR", now)
		return hostileRecordFor(now, bytes.Replace(valid, []byte("hostile-user"), []byte("hostile-\xff\xfe"), 1))
	}},
	{"huge_header", func(now time.Time) *kgo.Record {
		r := hostileRecord(uuid.New(), now, nil)
		// 256 KiB in X-Event-Type: a header the consumer must neither store whole in
		// its dedup nor choke on, well within the broker's default 1 MiB.
		r.Headers[1].Value = bytes.Repeat([]byte("X"), 256<<10)
		return r
	}},
	{"missing_headers", func(now time.Time) *kgo.Record {
		r := hostileRecord(uuid.New(), now, nil)
		r.Headers = nil
		return r
	}},
	{"key_not_payment_id", func(now time.Time) *kgo.Record {
		r := hostileRecord(uuid.New(), now, nil)
		r.Key = []byte(uuid.NewString())
		return r
	}},
}

// hostileRecord is a record about the new payment id with every header of the contract
// and value as its payload; a nil value is a valid PaymentCreated of that payment.
func hostileRecord(paymentID uuid.UUID, now time.Time, value []byte) *kgo.Record {
	if value == nil {
		value = hostilePayload(paymentID, "hostile-user", "EUR", now)
	}
	return event.Envelope{ID: uuid.New(), Type: event.TypePaymentCreated, Key: paymentID.String(), OccurredAt: now, Payload: value}.Record("", now)
}

// hostileRecordFor is hostileRecord with the key taken from the payload's payment_id.
func hostileRecordFor(now time.Time, value []byte) *kgo.Record {
	var p struct {
		PaymentID uuid.UUID `json:"payment_id"`
	}
	_ = json.Unmarshal(value, &p) // the payload is one of ours: it has a payment_id
	return hostileRecord(p.PaymentID, now, value)
}

// hostilePayload is a PaymentCreated with the given fields; uuid.Nil picks a new
// payment id.
func hostilePayload(paymentID uuid.UUID, userID, currency string, now time.Time) []byte {
	if paymentID == uuid.Nil {
		paymentID = uuid.New()
	}
	// Marshal cannot fail on these plain fields.
	b, _ := json.Marshal(event.PaymentCreated{PaymentID: paymentID, UserID: userID, Amount: 100, Currency: currency, CreatedAt: now.UTC()})
	return b
}

// duplicateUserID marks the payload of a harness's duplicate: a decision or total made
// from it would name this user.
const duplicateUserID = "hostile-duplicate"

// duplicateRecord is a second record of a real event: its X-Event-Id and key, and a
// payload that differs from the event's (another user and amount), which the consumer
// must count as a duplicate of the first copy, never decide.
func duplicateRecord(eventID, paymentID uuid.UUID, now time.Time) *kgo.Record {
	payload, _ := json.Marshal(event.PaymentCreated{PaymentID: paymentID, UserID: duplicateUserID, Amount: 1, Currency: "EUR", CreatedAt: now.UTC()})
	return event.Envelope{ID: eventID, Type: event.TypePaymentCreated, Key: paymentID.String(), OccurredAt: now, Payload: payload}.Record("", now)
}
