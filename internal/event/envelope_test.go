package event_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// goldenEnvelope is the envelope of the event in docs/examples/payment_created_v1.json.
var goldenEnvelope = event.Envelope{
	ID:         uuid.MustParse("6a1f0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b"),
	Type:       event.TypePaymentCreated,
	Key:        "01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10",
	OccurredAt: time.Date(2026, 11, 30, 9, 15, 42, 123456000, time.UTC),
	Payload:    []byte(`{"payment_id":"01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10"}`),
}

// The record is what docs/contract.md promises, byte for byte: consumers in other
// languages read these headers without this package.
func TestRecordCarriesTheContract(t *testing.T) {
	t.Parallel()
	publishedAt := time.Date(2026, 11, 30, 9, 15, 43, 0, time.UTC)
	env := goldenEnvelope
	// Event time in another zone is still sent in UTC.
	env.OccurredAt = env.OccurredAt.In(time.FixedZone("CET", 3600))

	got := env.Record("payments.events", publishedAt)

	want := &kgo.Record{
		Topic: "payments.events",
		Key:   []byte("01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10"),
		Value: goldenEnvelope.Payload,
		Headers: []kgo.RecordHeader{
			{Key: "X-Event-Id", Value: []byte("6a1f0c1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b")},
			{Key: "X-Event-Type", Value: []byte("PaymentCreated")},
			{Key: "X-Event-Occurred-At", Value: []byte("2026-11-30T09:15:42.123456Z")},
		},
		Timestamp: publishedAt,
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateComparable(kgo.RecordAttrs{})); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

// What a producer writes, a consumer reads back unchanged.
func TestFromRecordReadsWhatRecordWrote(t *testing.T) {
	t.Parallel()
	got, err := event.FromRecord(goldenEnvelope.Record("payments.events", time.Now()))
	if err != nil {
		t.Fatalf("FromRecord: %v", err)
	}
	if diff := cmp.Diff(goldenEnvelope, got); diff != "" {
		t.Errorf("envelope (-want +got):\n%s", diff)
	}
}

func TestFromRecordRejectsBadHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		modify     func(r *kgo.Record)
		wantHeader string
		wantValue  string
	}{
		{"no event id", func(r *kgo.Record) { r.Headers = r.Headers[1:] }, event.HeaderID, ""},
		{"empty event id", func(r *kgo.Record) { r.Headers[0].Value = nil }, event.HeaderID, ""},
		{"event id not a UUID", func(r *kgo.Record) { r.Headers[0].Value = []byte("42") }, event.HeaderID, "42"},
		{"no event type", func(r *kgo.Record) { r.Headers = r.Headers[:1] }, event.HeaderType, ""},
		{"no occurred at", func(r *kgo.Record) { r.Headers = r.Headers[:2] }, event.HeaderOccurredAt, ""},
		{"occurred at not RFC 3339", func(r *kgo.Record) { r.Headers[2].Value = []byte("yesterday") }, event.HeaderOccurredAt, "yesterday"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := goldenEnvelope.Record("payments.events", time.Now())
			tt.modify(r)
			_, err := event.FromRecord(r)
			if err == nil {
				t.Fatalf("FromRecord = no error, want one on header %q", tt.wantHeader)
			}
			if err.Header != tt.wantHeader || err.Value != tt.wantValue {
				t.Errorf("FromRecord error on header %q value %q (%v), want header %q value %q",
					err.Header, err.Value, err, tt.wantHeader, tt.wantValue)
			}
		})
	}
}

// A header sent twice counts once, with its last value, as most Kafka clients read it.
func TestFromRecordLastHeaderWins(t *testing.T) {
	t.Parallel()
	r := goldenEnvelope.Record("payments.events", time.Now())
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: event.HeaderType, Value: []byte("PaymentRefunded")})
	got, err := event.FromRecord(r)
	if err != nil {
		t.Fatalf("FromRecord: %v", err)
	}
	if got.Type != "PaymentRefunded" {
		t.Errorf("type = %q, want the last header's %q", got.Type, "PaymentRefunded")
	}
}
