package antifraud

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The fuzz tests build a record from what another producer controls: the key, the
// value, the three envelope headers and one more header of any bytes.

// addSeeds adds records that once stalled the consumer, and the golden one.
func addSeeds(f *testing.F) {
	const paymentID = "01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10"
	valueOf := func(userID, currency string) []byte {
		return []byte(`{"payment_id":"` + paymentID + `","user_id":"` + userID + `","amount":1999,"currency":"` +
			currency + `","created_at":"2026-11-30T09:15:42.123456Z"}`)
	}
	seed := func(key string, value []byte, headerKey, headerValue string) {
		f.Add([]byte(key), value, "6a1f0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b", event.TypePaymentCreated,
			"2026-11-30T09:15:42.123456Z", []byte(headerKey), []byte(headerValue))
	}
	seed(paymentID, valueOf("u-42", "EUR"), "trace", "abc")
	seed(paymentID, valueOf(`u-\u0000`, "EUR"), "", "")
	seed(paymentID, valueOf("u-42", `EU\u0000`), "", "")
	seed(paymentID, valueOf(`u-\ud800`, "EUR"), "", "")
	seed(paymentID, valueOf(strings.Repeat("0123456789abcdef", 200), "EUR"), "", "")
	seed(paymentID, append(valueOf("u-42", "EUR"), 0xff), "", "")
	seed(paymentID, valueOf("u-42", "EUR"), "trace\x00", "a\x00\xff")
	seed("", valueOf("u-42", "EUR"), "", "")
	f.Add([]byte(paymentID), valueOf("u-42", "EUR"), "", "", "", []byte{}, []byte{})
}

// fuzzRecord is the record of the fuzzed fields.
func fuzzRecord(key, value []byte, id, typ, occurredAt string, headerKey, headerValue []byte) *kgo.Record {
	return &kgo.Record{
		Topic: "fuzz",
		Key:   key,
		Value: value,
		Headers: []kgo.RecordHeader{
			{Key: event.HeaderID, Value: []byte(id)},
			{Key: event.HeaderType, Value: []byte(typ)},
			{Key: event.HeaderOccurredAt, Value: []byte(occurredAt)},
			{Key: string(headerKey), Value: headerValue},
		},
	}
}

// FuzzDecodeRecord checks decoding as a pure function: every record is either an event
// with fields the database can store, or poison with one of the fixed reasons, and its
// dead letter's headers are JSON that jsonb accepts.
func FuzzDecodeRecord(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, key, value []byte, id, typ, occurredAt string, headerKey, headerValue []byte) {
		r := fuzzRecord(key, value, id, typ, occurredAt, headerKey, headerValue)
		ev, poison := decodeRecord(r)
		if poison != nil {
			if !slices.Contains(poisonReasons, poison.Reason) || poison.Reason == PoisonStoreFailed {
				t.Fatalf("poison reason %q is not a reason decodeRecord may give", poison.Reason)
			}
			if d := storableText(poison.Detail); !isStorableText(d) || len(d) > maxDetailBytes+3 {
				t.Fatalf("detail %q is not storable", d)
			}
		} else {
			p := ev.payload
			if event.ValidateUserID(p.UserID) != nil || !validCurrency(p.Currency) || p.Amount <= 0 || p.PaymentID == uuid.Nil {
				t.Fatalf("decodeRecord accepted %+v", p)
			}
		}
		h := headersJSON(event.HeaderValues(r))
		if !utf8.ValidString(h) || strings.Contains(h, `\u0000`) || !json.Valid([]byte(h)) {
			t.Fatalf("headersJSON = %q: not JSON that jsonb accepts", h)
		}
	})
}

// FuzzDecodeAndStore runs each record through processBatch, the code a poll runs, on a
// real database: every record must end up decided (or a duplicate of one), or
// dead-lettered, and storing it must never fail. An input that fails the property would
// stall a partition in production.
//
// Each fuzzing worker has a database of its own; inputs commit in it, as a poll would,
// so that an event id met again exercises the redelivery path too.
func FuzzDecodeAndStore(f *testing.F) {
	addSeeds(f)
	pool := testenv.NewPool(f, migrations.Antifraud)
	// processBatch never talks to Kafka: the brokers only satisfy Validate.
	c, err := NewConsumer(pool, Config{Brokers: []string{"127.0.0.1:1"}}, discardLogger(), mustMetrics(f))
	if err != nil {
		f.Fatalf("NewConsumer: %v", err)
	}
	var offset int64
	f.Fuzz(func(t *testing.T, key, value []byte, id, typ, occurredAt string, headerKey, headerValue []byte) {
		r := fuzzRecord(key, value, id, typ, occurredAt, headerKey, headerValue)
		offset++
		r.Offset = offset
		res, err := c.processBatch(context.Background(), []*kgo.Record{r})
		if err != nil {
			t.Fatalf("processBatch: %v (isDataError %t)", err, isDataError(err))
		}
		if outcomes := res.processed + res.duplicates + len(res.poison); outcomes != 1 {
			t.Fatalf("processed %d, duplicates %d, poison %d: want exactly one outcome", res.processed, res.duplicates, len(res.poison))
		}
		var stored bool
		query := `SELECT EXISTS (SELECT 1 FROM consumer_dead_letters WHERE topic = 'fuzz' AND "offset" = $1)`
		arg := any(r.Offset)
		if len(res.poison) == 0 {
			ev, _ := decodeRecord(r)
			query, arg = `SELECT EXISTS (SELECT 1 FROM processed_events WHERE event_id = $1)`, ev.id
		}
		if err := pool.QueryRow(context.Background(), query, arg).Scan(&stored); err != nil || !stored {
			t.Fatalf("record not in the database after processBatch (%v): %s", err, query)
		}
	})
}
