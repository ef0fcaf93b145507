package event_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/event"
)

var update = flag.Bool("update", false, "rewrite the golden files in docs/examples/")

// goldenEvents pins the payload of every event version to a file in docs/examples/,
// the one copy that students read and every test of the repository decodes. A new
// lifecycle event, or a new version of one, is a new row and a new file.
var goldenEvents = []struct {
	file  string
	event any
	// decodeInto returns a pointer to a zero value of the event's type.
	decodeInto func() any
}{
	{
		file: "../../docs/examples/payment_created_v1.json",
		event: event.PaymentCreated{
			PaymentID: uuid.MustParse("01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10"),
			UserID:    "u-42",
			Amount:    1999,
			Currency:  "EUR",
			CreatedAt: time.Date(2026, 11, 30, 9, 15, 42, 123456000, time.UTC),
		},
		decodeInto: func() any { return new(event.PaymentCreated) },
	},
	{
		file: "../../docs/examples/payment_captured_v1.json",
		event: event.PaymentCaptured{
			PaymentID:  uuid.MustParse("01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10"),
			Sequence:   2,
			UserID:     "u-42",
			Amount:     1999,
			Currency:   "EUR",
			CapturedAt: time.Date(2026, 11, 30, 9, 20, 3, 500000000, time.UTC),
		},
		decodeInto: func() any { return new(event.PaymentCaptured) },
	},
	{
		file: "../../docs/examples/payment_refunded_v1.json",
		event: event.PaymentRefunded{
			PaymentID:     uuid.MustParse("01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10"),
			Sequence:      3,
			RefundID:      uuid.MustParse("01937a31-0a7e-7c12-8f4d-2b6e9a1c3d57"),
			UserID:        "u-42",
			Amount:        500,
			Currency:      "EUR",
			RefundedTotal: 500,
			RefundedAt:    time.Date(2026, 12, 1, 14, 2, 11, 42000000, time.UTC),
		},
		decodeInto: func() any { return new(event.PaymentRefunded) },
	},
	{
		file: "../../docs/examples/payment_cancelled_v1.json",
		event: event.PaymentCancelled{
			PaymentID:   uuid.MustParse("01937a2f-1d2e-7a8b-9c0d-4e5f6a7b8c9d"),
			Sequence:    2,
			UserID:      "u-7",
			Amount:      4200,
			Currency:    "EUR",
			CancelledAt: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		},
		decodeInto: func() any { return new(event.PaymentCancelled) },
	},
}

// The payload of each event version is a contract with every consumer. If this test
// fails, the change breaks them: add a new version instead of running -update.
func TestPayloadsMatchGoldenFiles(t *testing.T) {
	t.Parallel()
	for _, tt := range goldenEvents {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			got, err := json.MarshalIndent(tt.event, "", "  ")
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			got = append(got, '\n')
			path := filepath.FromSlash(tt.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatalf("update golden file: %v", err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (run go test -run %s -update to create it): %v", t.Name(), err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%T JSON (-golden +got):\n%s", tt.event, diff)
			}
		})
	}
}

// A consumer decoding a golden file gets back every field, with nothing left over.
func TestPayloadsDecodeFromGoldenFiles(t *testing.T) {
	t.Parallel()
	for _, tt := range goldenEvents {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(filepath.FromSlash(tt.file))
			if err != nil {
				t.Fatalf("read golden file: %v", err)
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			got := tt.decodeInto()
			if err := dec.Decode(got); err != nil {
				t.Fatalf("decode golden file: %v", err)
			}
			if diff := cmp.Diff(tt.event, reflect.ValueOf(got).Elem().Interface()); diff != "" {
				t.Errorf("decoded event (-want +got):\n%s", diff)
			}
		})
	}
}
