package payment

import (
	"fmt"
	"net/http"
)

// Error codes, after benbjohnson/wtf: the domain says what went wrong, and one
// function (StatusCode) decides what that means in HTTP.
const (
	// Invalid: the request is malformed or a field is wrong. Fix the request.
	Invalid = "invalid"
	// Unauthorized: no valid API key. Send "Authorization: Bearer <key>".
	Unauthorized = "unauthorized"
	// NotFound: no such payment, or not the merchant's (never told apart).
	NotFound = "not_found"
	// Unprocessable: well-formed, but conflicts with what was already done, e.g. an
	// Idempotency-Key reused with a different body.
	Unprocessable = "unprocessable"
	// Conflict: the request is valid, but the payment's state forbids it now (capture
	// twice, refund before capture, more refunded than captured), or another transition
	// of the payment won the race. The message names the state found.
	Conflict = "conflict"
	// InFlight: another request with the same Idempotency-Key is still being
	// processed. Retry after Retry-After with the same key: it then gets that request's
	// answer. Never a second payment.
	InFlight = "in_flight"
	// TooLarge: the body is larger than the API accepts.
	TooLarge = "too_large"
	// UnsupportedMediaType: the body is not declared as JSON.
	UnsupportedMediaType = "unsupported_media_type"
	// Unavailable: the database cannot be reached right now. Retry later, with the same
	// Idempotency-Key, so that a request that did commit is not applied twice.
	Unavailable = "unavailable"
	// Internal: a bug or an unexpected failure. The client is told nothing more.
	Internal = "internal"
)

// An Error is a failure the client can act on. Any other error is internal.
type Error struct {
	// Code is one of the constants above.
	Code string
	// Message is for the client: it says what is wrong and how to fix it.
	Message string
	// Field names the offending field of the request ("amount", "Idempotency-Key"),
	// if there is one.
	Field string
	// err is the cause, for logs; never shown to the client.
	err error
}

func (e *Error) Error() string {
	msg := e.Code + ": " + e.Message
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

// Unwrap returns the cause, so errors.Is still sees, for example, a driver error.
func (e *Error) Unwrap() error { return e.err }

// Errorf returns an *Error with a formatted message.
func Errorf(code, field, format string, args ...any) *Error {
	return &Error{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// StatusCode maps an error code to its HTTP status. It is the only place that does.
func StatusCode(code string) int {
	switch code {
	case Invalid:
		return http.StatusBadRequest
	case Unauthorized:
		return http.StatusUnauthorized
	case NotFound:
		return http.StatusNotFound
	case Unprocessable:
		return http.StatusUnprocessableEntity
	case Conflict, InFlight:
		return http.StatusConflict
	case TooLarge:
		return http.StatusRequestEntityTooLarge
	case UnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case Unavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}
