package payment

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// maxBodyBytes bounds a request body. A payment is under 200 bytes; 4 KiB leaves room
// for generous user ids and whitespace while keeping a flood of large bodies cheap.
const maxBodyBytes = 4 << 10

// createBody is the JSON body of POST /payments as it arrives. Pointers tell a missing
// field from a zero one; the amount stays raw so that we can tell an overflowing
// number, a fraction and a string apart and say which it was.
type createBody struct {
	UserID   *string         `json:"user_id"`
	Amount   json.RawMessage `json:"amount"`
	Currency *string         `json:"currency"`
}

// DecodeCreateRequest reads and validates the body of POST /payments. Every failure is
// an *Error naming the field; nothing is written anywhere before it returns nil.
// Exported for the teaching dual-write handler, which must accept the same input.
func DecodeCreateRequest(w http.ResponseWriter, r *http.Request) (CreateRequest, error) {
	if err := requireJSON(r.Header.Get("Content-Type")); err != nil {
		return CreateRequest{}, err
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	var body createBody
	if err := dec.Decode(&body); err != nil {
		return CreateRequest{}, decodeError(err)
	}
	// A second value after the object ("{...} {...}" or "{...} x") is a malformed
	// request, not something to ignore.
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return CreateRequest{}, decodeError(err)
		}
		return CreateRequest{}, Errorf(Invalid, "", "the body must hold exactly one JSON object, found data after it")
	}

	if body.UserID == nil {
		return CreateRequest{}, Errorf(Invalid, "user_id", "user_id is required")
	}
	if body.Currency == nil {
		return CreateRequest{}, Errorf(Invalid, "currency", "currency is required")
	}
	amount, err := parseAmount(body.Amount)
	if err != nil {
		return CreateRequest{}, err
	}
	req := CreateRequest{UserID: *body.UserID, Amount: amount, Currency: *body.Currency}
	if err := req.Validate(); err != nil {
		return CreateRequest{}, err
	}
	return req, nil
}

// refundBody is the optional JSON body of POST /payments/{id}/refund.
type refundBody struct {
	Amount json.RawMessage `json:"amount"`
}

// DecodeTransitionRequest reads the body of a transition of payment id. Capture and
// cancel take no body (an empty one or {}); a refund takes {"amount": n} with n > 0 in
// minor units, or no amount (or no body) to refund whatever is left. Every failure is an
// *Error naming the field, before anything is written.
func DecodeTransitionRequest(w http.ResponseWriter, r *http.Request, id uuid.UUID, action string) (TransitionRequest, error) {
	req := TransitionRequest{PaymentID: id, Action: action}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		return req, decodeError(err)
	}
	if len(raw) == 0 {
		return req, nil
	}
	if err := requireJSON(r.Header.Get("Content-Type")); err != nil {
		return req, err
	}
	// JSON null decodes into a struct as if it were {}; the body must be an object. A body
	// of white space only is not JSON either: "no body" is an empty one.
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return req, Errorf(Invalid, "", "the body must be empty or a JSON object (%s takes %s), not white space only", action, transitionFields(action))
	}
	if trimmed[0] != '{' {
		return req, Errorf(Invalid, "", "the body must be a JSON object (%s takes %s), not %s", action, transitionFields(action), jsonKind(trimmed[0]))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var body refundBody
	if action == ActionRefund {
		err = dec.Decode(&body)
	} else {
		err = dec.Decode(&struct{}{})
	}
	if err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field, _ := strconv.Unquote(name)
			return req, Errorf(Invalid, field, "unknown field %s; %s takes %s", name, action, transitionFields(action))
		}
		return req, decodeError(err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		return req, Errorf(Invalid, "", "the body must hold exactly one JSON object, found data after it")
	}
	if action != ActionRefund || len(body.Amount) == 0 {
		return req, nil
	}
	if string(bytes.TrimSpace(body.Amount)) == "null" {
		return req, Errorf(Invalid, "amount", "amount must be a positive integer in minor units, not null; leave it out to refund all that is left")
	}
	if req.RefundAmount, err = parseAmount(body.Amount); err != nil {
		return req, err
	}
	if req.RefundAmount <= 0 {
		return req, Errorf(Invalid, "amount", "amount must be a positive integer in minor units, got %d; leave it out to refund all that is left", req.RefundAmount)
	}
	return req, nil
}

// transitionFields says what the body of action may hold, for error messages.
func transitionFields(action string) string {
	if action == ActionRefund {
		return `no field but an optional "amount"`
	}
	return "no body (or {})"
}

func requireJSON(contentType string) error {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil || mediaType != "application/json" {
		return Errorf(UnsupportedMediaType, "Content-Type", "send the body as JSON with Content-Type: application/json, got %q", contentType)
	}
	return nil
}

// parseAmount accepts a JSON integer that fits in int64, and nothing else.
func parseAmount(raw json.RawMessage) (int64, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return 0, Errorf(Invalid, "amount", "amount is required")
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return 0, Errorf(Invalid, "amount", "amount must be a JSON integer in minor units (e.g. 1999), not %s", jsonKind(raw[0]))
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, Errorf(Invalid, "amount", "amount %s does not fit in a 64-bit integer", raw)
	}
	if err != nil {
		return 0, Errorf(Invalid, "amount", "amount must be an integer in minor units (e.g. 1999 for 19.99), got %s", raw)
	}
	return n, nil
}

func jsonKind(first byte) string {
	switch first {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	default:
		return "this value"
	}
}

// decodeError turns an encoding/json error into an *Error for the client.
func decodeError(err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return Errorf(TooLarge, "", "the body is larger than %d bytes", maxBodyBytes)
	}
	if syntaxErr, ok := errors.AsType[*json.SyntaxError](err); ok {
		return Errorf(Invalid, "", "malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	}
	if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if typeErr.Field == "" {
			return Errorf(Invalid, "", "the body must be a JSON object, not a JSON %s", typeErr.Value)
		}
		return Errorf(Invalid, typeErr.Field, "%s must be a JSON %s, not a JSON %s", typeErr.Field, typeErr.Type.Kind(), typeErr.Value)
	}
	switch {
	case errors.Is(err, io.EOF):
		return Errorf(Invalid, "", "the body is empty; send a JSON object like {\"user_id\": \"u-42\", \"amount\": 1999, \"currency\": \"EUR\"}")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(Invalid, "", "malformed JSON: the body ends too early")
	}
	// encoding/json has no error type for unknown fields; its message is stable
	// (`json: unknown field "name"`) and is the only place the name is found.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field, _ := strconv.Unquote(name)
		return Errorf(Invalid, field, "unknown field %s; the fields are user_id, amount and currency", name)
	}
	return Errorf(Invalid, "", "malformed request body: %v", err)
}

// idempotencyKey reads the optional Idempotency-Key header: absent, or 1 to 255
// printable ASCII characters without spaces (the pattern in docs/openapi.yaml). A header
// that is present but empty is refused rather than read as "no key": the client meant to
// send a key, and a retry of its request would silently create a second payment.
func idempotencyKey(r *http.Request) (string, error) {
	if len(r.Header.Values("Idempotency-Key")) == 0 {
		return "", nil
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return "", Errorf(Invalid, "Idempotency-Key", "Idempotency-Key is empty: send 1 to 255 printable ASCII characters, e.g. a UUID, or leave the header out")
	}
	if len(key) > 255 {
		return "", Errorf(Invalid, "Idempotency-Key", "Idempotency-Key must be at most 255 characters, got %d", len(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return "", Errorf(Invalid, "Idempotency-Key", "Idempotency-Key must be printable ASCII without spaces, e.g. a UUID")
		}
	}
	return key, nil
}
