package antifraud

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// goldenPaymentCreatedV1 is the contract's golden file: the consumer must decode exactly
// what package event pins as PaymentCreated v1.
const goldenPaymentCreatedV1 = "../../docs/examples/payment_created_v1.json"

// goldenRecord is the record the relay publishes for the golden event, with the header
// names spelled out as docs/contract.md does, so a renamed constant cannot go unnoticed.
func goldenRecord(t *testing.T) *kgo.Record {
	t.Helper()
	value, err := os.ReadFile(filepath.FromSlash(goldenPaymentCreatedV1))
	if err != nil {
		t.Fatalf("read golden file: %v", err)
	}
	return &kgo.Record{
		Key:   []byte("01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10"),
		Value: value,
		Headers: []kgo.RecordHeader{
			{Key: "X-Event-Id", Value: []byte("6a1f0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b")},
			{Key: "X-Event-Type", Value: []byte("PaymentCreated")},
			{Key: "X-Event-Occurred-At", Value: []byte("2026-11-30T09:15:42.123456Z")},
		},
	}
}

func TestDecodeGoldenPaymentCreated(t *testing.T) {
	t.Parallel()
	ev, poison := decodeRecord(goldenRecord(t))
	if poison != nil {
		t.Fatalf("decodeRecord(golden) = %v, want no error", poison)
	}
	at := time.Date(2026, 11, 30, 9, 15, 42, 123456000, time.UTC)
	want := event.PaymentCreated{
		PaymentID: uuid.MustParse("01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10"),
		UserID:    "u-42",
		Amount:    1999,
		Currency:  "EUR",
		CreatedAt: at,
	}
	if diff := cmp.Diff(want, ev.payload); diff != "" {
		t.Errorf("decoded payload mismatch (-want +got):\n%s", diff)
	}
	if got, want := ev.id, uuid.MustParse("6a1f0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b"); got != want {
		t.Errorf("event id = %s, want %s", got, want)
	}
	if !ev.occurredAt.Equal(at) {
		t.Errorf("occurred at = %s, want %s", ev.occurredAt, at)
	}
}

func TestDecodePoison(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(r *kgo.Record)
		want   string
	}{
		{"no event id", func(r *kgo.Record) { r.Headers = r.Headers[1:] }, PoisonMissingEventID},
		{"empty event id", func(r *kgo.Record) { r.Headers[0].Value = nil }, PoisonMissingEventID},
		{"event id not a UUID", func(r *kgo.Record) { r.Headers[0].Value = []byte("42") }, PoisonInvalidEventID},
		{"no event type", func(r *kgo.Record) { r.Headers = r.Headers[:1] }, PoisonUnknownEventType},
		{"other event type", func(r *kgo.Record) { r.Headers[1].Value = []byte("PaymentAuthorized") }, PoisonUnknownEventType},
		{"refund without its fields", func(r *kgo.Record) { r.Headers[1].Value = []byte("PaymentRefunded") }, PoisonInvalidPayload},
		{"occurred at not RFC 3339", func(r *kgo.Record) { r.Headers[2].Value = []byte("yesterday") }, PoisonInvalidOccurredAt},
		{"value not JSON", func(r *kgo.Record) { r.Value = []byte("<xml/>") }, PoisonInvalidPayload},
		{"value empty", func(r *kgo.Record) { r.Value = nil }, PoisonInvalidPayload},
		{"amount zero", func(r *kgo.Record) {
			r.Value = []byte(`{"payment_id":"01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10","user_id":"u-1","amount":0,"currency":"EUR","created_at":"2026-11-30T09:15:42Z"}`)
		}, PoisonInvalidPayload},
		{"no user", func(r *kgo.Record) {
			r.Value = []byte(`{"payment_id":"01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10","amount":5,"currency":"EUR","created_at":"2026-11-30T09:15:42Z"}`)
		}, PoisonInvalidPayload},
		{"NUL in user_id", func(r *kgo.Record) { r.Value = paymentJSON(`"u-\u0000"`, `"EUR"`) }, PoisonInvalidPayload},
		{"NUL in currency", func(r *kgo.Record) { r.Value = paymentJSON(`"u-1"`, `"EU\u0000"`) }, PoisonInvalidPayload},
		{"lone surrogate in user_id", func(r *kgo.Record) { r.Value = paymentJSON(`"u-\ud800"`, `"EUR"`) }, PoisonInvalidPayload},
		{"invalid UTF-8 in user_id", func(r *kgo.Record) { r.Value = paymentJSON("\"u-\xff\"", `"EUR"`) }, PoisonInvalidPayload},
		{"user_id with a space", func(r *kgo.Record) { r.Value = paymentJSON(`"u 1"`, `"EUR"`) }, PoisonInvalidPayload},
		{"user_id of 65 characters", func(r *kgo.Record) { r.Value = paymentJSON(`"`+strings.Repeat("u", 65)+`"`, `"EUR"`) }, PoisonInvalidPayload},
		{"currency in lower case", func(r *kgo.Record) { r.Value = paymentJSON(`"u-1"`, `"eur"`) }, PoisonInvalidPayload},
		{"currency of 3 bytes, 2 characters", func(r *kgo.Record) { r.Value = paymentJSON(`"u-1"`, `"E\u00e9"`) }, PoisonInvalidPayload},
		{"no key", func(r *kgo.Record) { r.Key = nil }, PoisonInvalidKey},
		{"key of another payment", func(r *kgo.Record) { r.Key = []byte("7c0e5a36-3c55-4c3e-9a59-0d1f6f2b7a11") }, PoisonInvalidKey},
		{"no payment id", func(r *kgo.Record) {
			r.Value = []byte(`{"user_id":"u-1","amount":5,"currency":"EUR","created_at":"2026-11-30T09:15:42Z"}`)
		}, PoisonInvalidPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := goldenRecord(t)
			tt.modify(r)
			_, poison := decodeRecord(r)
			if poison == nil {
				t.Fatalf("decodeRecord = no error, want reason %q", tt.want)
			}
			if poison.Reason != tt.want {
				t.Errorf("decodeRecord reason = %q (%s), want %q", poison.Reason, poison.Detail, tt.want)
			}
		})
	}
}

// paymentJSON is the golden payment with user_id and currency given as raw JSON, so that
// a test can write escapes and bytes encoding/json never produces from a Go string.
func paymentJSON(userID, currency string) []byte {
	return []byte(`{"payment_id":"01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10","user_id":` + userID +
		`,"amount":5,"currency":` + currency + `,"created_at":"2026-11-30T09:15:42Z"}`)
}

func TestDecodeAcceptsUnknownFields(t *testing.T) {
	t.Parallel()
	r := goldenRecord(t)
	r.Value = []byte(`{"payment_id":"01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10","user_id":"u-1","amount":5,"currency":"EUR","created_at":"2026-11-30T09:15:42Z","channel":"web"}`)
	if _, poison := decodeRecord(r); poison != nil {
		t.Errorf("decodeRecord with an added field = %v, want no error (v1 may grow fields)", poison)
	}
}
