package payment_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Every bad request is answered with a 4xx that names the field, and writes nothing.
func TestCreateRejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)

	tests := []struct {
		name        string
		contentType string
		key         string
		// emptyKey sends an Idempotency-Key header with no value (key is then unused).
		emptyKey   bool
		body       string
		wantStatus int
		wantCode   string
		wantField  string
		// wantMessage is a part of the message the client must see.
		wantMessage string
	}{
		{name: "malformed JSON", body: `{"user_id": "u-42",`, wantStatus: 400, wantCode: "invalid", wantMessage: "malformed JSON"},
		{name: "not JSON at all", body: `user_id=u-42`, wantStatus: 400, wantCode: "invalid", wantMessage: "malformed JSON"},
		{name: "empty body", body: ``, wantStatus: 400, wantCode: "invalid", wantMessage: "empty"},
		{name: "array instead of object", body: `[1, 2]`, wantStatus: 400, wantCode: "invalid", wantMessage: "must be a JSON object"},
		{name: "unknown field", body: `{"user_id": "u-42", "amount": 1999, "currency": "EUR", "note": "hi"}`, wantStatus: 400, wantCode: "invalid", wantField: "note", wantMessage: "unknown field"},
		{name: "trailing data", body: validBody + ` {"user_id": "u-43"}`, wantStatus: 400, wantCode: "invalid", wantMessage: "exactly one JSON object"},
		{name: "trailing garbage", body: validBody + ` x`, wantStatus: 400, wantCode: "invalid", wantMessage: "exactly one JSON object"},
		{name: "missing user_id", body: `{"amount": 1999, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "user_id", wantMessage: "required"},
		{name: "null user_id", body: `{"user_id": null, "amount": 1999, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "user_id", wantMessage: "required"},
		{name: "empty user_id", body: `{"user_id": "", "amount": 1999, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "user_id", wantMessage: "1 to 64"},
		{name: "user_id too long", body: `{"user_id": "` + strings.Repeat("u", 65) + `", "amount": 1999, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "user_id", wantMessage: "1 to 64"},
		{name: "user_id with NUL", body: `{"user_id": "u\u0000", "amount": 1999, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "user_id", wantMessage: "visible ASCII"},
		{name: "user_id of only spaces", body: `{"user_id": "   ", "amount": 1999, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "user_id", wantMessage: "without spaces"},
		{name: "user_id with a trailing space", body: `{"user_id": "u-42 ", "amount": 1999, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "user_id", wantMessage: "without spaces"},
		{name: "user_id with a non-breaking space", body: `{"user_id": "u\u00a042", "amount": 1999, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "user_id", wantMessage: "U+00A0"},
		{name: "user_id with a Cyrillic look-alike", body: `{"user_id": "\u0430lice", "amount": 1999, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "user_id", wantMessage: "visible ASCII"},
		{name: "user_id is a number", body: `{"user_id": 42, "amount": 1999, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "user_id", wantMessage: "must be a JSON string"},
		{name: "missing amount", body: `{"user_id": "u-42", "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "amount", wantMessage: "required"},
		{name: "zero amount", body: `{"user_id": "u-42", "amount": 0, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "amount", wantMessage: "positive"},
		{name: "negative amount", body: `{"user_id": "u-42", "amount": -5, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "amount", wantMessage: "positive"},
		{name: "fractional amount", body: `{"user_id": "u-42", "amount": 19.99, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "amount", wantMessage: "integer"},
		{name: "exponent amount", body: `{"user_id": "u-42", "amount": 1e3, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "amount", wantMessage: "integer"},
		{name: "overflowing amount", body: `{"user_id": "u-42", "amount": 9223372036854775808, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "amount", wantMessage: "64-bit"},
		{name: "amount as string", body: `{"user_id": "u-42", "amount": "1999", "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "amount", wantMessage: "not a string"},
		{name: "amount as boolean", body: `{"user_id": "u-42", "amount": true, "currency": "EUR"}`, wantStatus: 400, wantCode: "invalid", wantField: "amount", wantMessage: "not a boolean"},
		{name: "missing currency", body: `{"user_id": "u-42", "amount": 1999}`, wantStatus: 400, wantCode: "invalid", wantField: "currency", wantMessage: "required"},
		{name: "unknown currency", body: `{"user_id": "u-42", "amount": 1999, "currency": "ABC"}`, wantStatus: 400, wantCode: "invalid", wantField: "currency", wantMessage: "ISO 4217"},
		{name: "lower-case currency", body: `{"user_id": "u-42", "amount": 1999, "currency": "eur"}`, wantStatus: 400, wantCode: "invalid", wantField: "currency", wantMessage: "upper case"},
		{name: "withdrawn currency", body: `{"user_id": "u-42", "amount": 1999, "currency": "HRK"}`, wantStatus: 400, wantCode: "invalid", wantField: "currency", wantMessage: "ISO 4217"},
		{name: "test currency", body: `{"user_id": "u-42", "amount": 1999, "currency": "XTS"}`, wantStatus: 400, wantCode: "invalid", wantField: "currency", wantMessage: "ISO 4217"},
		{name: "currency as number", body: `{"user_id": "u-42", "amount": 1999, "currency": 978}`, wantStatus: 400, wantCode: "invalid", wantField: "currency", wantMessage: "must be a JSON string"},
		{name: "oversized body", body: `{"user_id": "u-42", "amount": 1999, "currency": "EUR", "pad": "` + strings.Repeat("x", 8<<10) + `"}`, wantStatus: 413, wantCode: "too_large", wantMessage: "larger than"},
		{name: "oversized whitespace after the object", body: validBody + strings.Repeat(" ", 8<<10), wantStatus: 413, wantCode: "too_large", wantMessage: "larger than"},
		{name: "text/plain", contentType: "text/plain", body: validBody, wantStatus: 415, wantCode: "unsupported_media_type", wantField: "Content-Type", wantMessage: "application/json"},
		{name: "no Content-Type", contentType: "-", body: validBody, wantStatus: 415, wantCode: "unsupported_media_type", wantField: "Content-Type", wantMessage: "application/json"},
		{name: "Idempotency-Key too long", key: strings.Repeat("k", 256), body: validBody, wantStatus: 400, wantCode: "invalid", wantField: "Idempotency-Key", wantMessage: "255"},
		{name: "Idempotency-Key with a space", key: "my key", body: validBody, wantStatus: 400, wantCode: "invalid", wantField: "Idempotency-Key", wantMessage: "printable ASCII"},
		{name: "Idempotency-Key empty", emptyKey: true, body: validBody, wantStatus: 400, wantCode: "invalid", wantField: "Idempotency-Key", wantMessage: "empty"},
		{name: "Idempotency-Key not ASCII", key: "k\u00e9y", body: validBody, wantStatus: 400, wantCode: "invalid", wantField: "Idempotency-Key", wantMessage: "printable ASCII"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(tt.body))
			switch tt.contentType {
			case "":
				req.Header.Set("Content-Type", "application/json; charset=utf-8")
			case "-":
			default:
				req.Header.Set("Content-Type", tt.contentType)
			}
			switch {
			case tt.emptyKey:
				req.Header["Idempotency-Key"] = []string{""}
			case tt.key != "":
				req.Header.Set("Idempotency-Key", tt.key)
			}
			rec := httptest.NewRecorder()

			b.handler.ServeHTTP(rec, req)

			if rec.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body)
			}
			got := decode[errorResponse](t, rec)
			if got.Error.Code != tt.wantCode || got.Error.Field != tt.wantField {
				t.Errorf("error code, field = %q, %q, want %q, %q; message %q",
					got.Error.Code, got.Error.Field, tt.wantCode, tt.wantField, got.Error.Message)
			}
			if !strings.Contains(got.Error.Message, tt.wantMessage) {
				t.Errorf("message = %q, want it to contain %q", got.Error.Message, tt.wantMessage)
			}
		})
	}
	// After every bad request above, and one good one to prove the handler writes at
	// all, there is exactly the good one.
	if rec := b.post(t, validBody, ""); rec.Code != http.StatusCreated {
		t.Fatalf("valid request after the bad ones: status = %d, want 201; body %s", rec.Code, rec.Body)
	}
	if diff := cmp.Diff(rowCounts{Payments: 1, Events: 1}, b.count(t)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if n := b.notified.Load(); n != 1 {
		t.Errorf("relay notified %d times, want 1", n)
	}
}
