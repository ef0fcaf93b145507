package payment_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/payment"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const goldenPaymentCreatedV1 = "testdata/payment_created_v1.json"

// goldenPayment is the payment the golden file describes.
var goldenPayment = payment.Payment{
	ID:        uuid.MustParse("01937a2e-5c8b-7d41-9a3e-6f0b2c4d8e10"),
	UserID:    "u-42",
	Amount:    1999,
	Currency:  "EUR",
	CreatedAt: time.Date(2026, 11, 30, 9, 15, 42, 123456000, time.UTC),
}

// The wire format of PaymentCreated v1 is a contract with every consumer. If this
// test fails, the change breaks them: add a v2 instead of running -update.
func TestPaymentCreatedV1MatchesGoldenFile(t *testing.T) {
	t.Parallel()
	got, err := json.MarshalIndent(payment.NewPaymentCreated(goldenPayment), "", "  ")
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	got = append(got, '\n')
	path := filepath.FromSlash(goldenPaymentCreatedV1)
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
		t.Errorf("PaymentCreated v1 JSON (-golden +got):\n%s", diff)
	}
}

// A consumer decoding the golden file gets back every field, with nothing left over.
func TestPaymentCreatedV1DecodesFromGoldenFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.FromSlash(goldenPaymentCreatedV1))
	if err != nil {
		t.Fatalf("read golden file: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var got payment.PaymentCreated
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode golden file: %v", err)
	}
	if diff := cmp.Diff(payment.NewPaymentCreated(goldenPayment), got); diff != "" {
		t.Errorf("decoded event (-want +got):\n%s", diff)
	}
}
