package payment_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/payment"
)

// The user id rule at its edges: what is accepted must be, and every look-alike of an
// accepted id must not be (validateUserID says why).
func TestCreateRequestValidateUserID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		userID string
		valid  bool
	}{
		{"u-42", true},
		{"7", true},
		{"alice@example.com", true},
		{"0193a1c2-7f3e-7b6a-9c1d-2e4f6a8b0c1d", true},
		{"!~", true}, // the ends of the visible ASCII range
		{strings.Repeat("u", 64), true},

		{"", false},
		{strings.Repeat("u", 65), false},
		{" ", false},
		{"   ", false},
		{" u-42", false},
		{"u-42 ", false},
		{"u 42", false},
		{"u-42\t", false},
		{"u-42\n", false},
		{"u\u00a042", false},  // non-breaking space
		{"u\u200b42", false},  // zero-width space
		{"\u0430lice", false}, // Cyrillic a
		{"josé", false},
		{"u\x7f", false}, // DEL
	}
	for _, tt := range tests {
		err := payment.CreateRequest{UserID: tt.userID, Amount: 1999, Currency: "EUR"}.Validate()
		if got := err == nil; got != tt.valid {
			t.Errorf("user_id %q: valid = %t, want %t (err %v)", tt.userID, got, tt.valid, err)
		}
	}
}

// Currencies is the list that Validate accepts, and the one docs/openapi.yaml must show.
func TestCurrenciesAreTheAcceptedCodes(t *testing.T) {
	t.Parallel()
	codes := payment.Currencies()
	if !slices.IsSorted(codes) {
		t.Errorf("Currencies() is not sorted: %v", codes)
	}
	for _, code := range codes {
		if err := (payment.CreateRequest{UserID: "u-42", Amount: 1, Currency: code}).Validate(); err != nil {
			t.Errorf("currency %s is listed but refused: %v", code, err)
		}
	}
	for _, code := range []string{"EUR", "USD", "JPY"} {
		if !slices.Contains(codes, code) {
			t.Errorf("Currencies() lacks %s", code)
		}
	}
	for _, code := range []string{"XTS", "XXX", "HRK", "eur"} {
		if slices.Contains(codes, code) {
			t.Errorf("Currencies() lists %s, which Validate refuses", code)
		}
	}
}
