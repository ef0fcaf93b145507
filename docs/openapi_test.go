package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/dscourse/payments-outbox/internal/payment"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// notExercised are the documented responses this test cannot provoke from a healthy
// API: failures of the database or of the server itself. Everything else in
// openapi.yaml must be seen at least once, so that the spec cannot keep a response the
// API no longer gives.
var notExercised = []string{
	"createPayment 500", "createPayment 503",
	"getPayment 500", "getPayment 503",
	"capturePayment 500", "capturePayment 503",
	"refundPayment 500", "refundPayment 503",
	"cancelPayment 500", "cancelPayment 503",
	"readyz 503",
	// Two requests with one key at once: internal/payment's idempotency tests hold the
	// first in flight and see the second's 409.
	"createPayment 409",
	"listDeadLetters 404", "listDeadLetters 500",
	"replayDeadLetter 500",
}

// loadSpec loads openapi.yaml and checks that it is a valid OpenAPI document.
func loadSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile("openapi.yaml")
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// spec loads openapi.yaml and points its server at base so that the router matches the
// requests of this test.
func spec(t *testing.T, base string) (*openapi3.T, routers.Router) {
	t.Helper()
	doc := loadSpec(t)
	doc.Servers = openapi3.Servers{{URL: base}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("route openapi.yaml: %v", err)
	}
	return doc, router
}

// requestField returns the schema of a field of CreatePaymentRequest.
func requestField(t *testing.T, doc *openapi3.T, name string) *openapi3.Schema {
	t.Helper()
	request := doc.Components.Schemas["CreatePaymentRequest"]
	if request == nil || request.Value.Properties[name] == nil {
		t.Fatalf("openapi.yaml: no %s in components.schemas.CreatePaymentRequest", name)
	}
	return request.Value.Properties[name].Value
}

// The spec's currency enum is the server's list: a code only one of them has is either
// offered to clients and refused, or accepted and hidden from them.
func TestSpecListsTheAcceptedCurrencies(t *testing.T) {
	t.Parallel()
	var inSpec []string
	for _, code := range requestField(t, loadSpec(t), "currency").Enum {
		inSpec = append(inSpec, fmt.Sprint(code))
	}
	slices.Sort(inSpec)
	if diff := cmp.Diff(payment.Currencies(), inSpec); diff != "" {
		t.Errorf("currency enum of openapi.yaml differs from payment.Currencies() (-server +spec):\n%s", diff)
	}
}

// The spec's user_id schema (length and pattern) accepts exactly the ids the server
// accepts: every single character up to U+FFFF, and strings at the length limits.
func TestSpecUserIDRuleIsTheServers(t *testing.T) {
	t.Parallel()
	schema := requestField(t, loadSpec(t), "user_id")
	ids := []string{"", strings.Repeat("u", 64), strings.Repeat("u", 65), " u", "u ", "u u", "   "}
	for r := rune(0); r <= 0xFFFF; r++ {
		if utf8.ValidRune(r) {
			ids = append(ids, string(r), "u"+string(r)+"u")
		}
	}
	for _, id := range ids {
		specOK := schema.VisitJSON(id) == nil
		serverErr := payment.CreateRequest{UserID: id, Amount: 1, Currency: "EUR"}.Validate()
		if specOK != (serverErr == nil) {
			t.Errorf("user_id %+q: spec accepts = %t, server accepts = %t (%v)", id, specOK, serverErr == nil, serverErr)
		}
	}
}

// A conformance checks every response against the spec, and whether the request was the
// one intended.
type conformance struct {
	t     *testing.T
	base  string
	admin string // the admin listener, where the operations tagged admin are served
	// apiKey is sent with every /payments request that does not set Authorization.
	apiKey  string
	router  routers.Router
	client  *http.Client
	options *openapi3filter.Options
	seen    map[string]bool // "operationId status"
}

func newConformance(t *testing.T, base string, router routers.Router) *conformance {
	client := &http.Client{}
	t.Cleanup(client.CloseIdleConnections)
	return &conformance{
		t: t, base: base, router: router, client: client, seen: map[string]bool{},
		options: &openapi3filter.Options{
			IncludeResponseStatus: true, // a status the spec does not list is a failure
			MultiError:            true,
			AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
			SchemaValidationOptions: []openapi3.SchemaValidationOption{
				openapi3.EnableFormatValidation(),
				openapi3.WithStringFormatValidator("uuid",
					openapi3.NewRegexpFormatValidator(openapi3.FormatOfStringForUUIDOfRFC9562)),
			},
		},
	}
}

// A call is one request and the status it must get.
type call struct {
	name    string
	method  string
	path    string
	headers map[string]string
	body    string
	// validRequest says the request itself conforms to the spec; the bad-input cases
	// send requests the spec forbids on purpose, so only their responses are checked.
	validRequest bool
	wantStatus   int
	// noKey sends a /payments request without the merchant's API key.
	noKey bool
}

// do sends c, checks the status, validates the response (and the request, when it is
// meant to be valid) against the spec, and returns the response and its body.
func (cf *conformance) do(c call) (*http.Response, []byte) {
	t := cf.t
	t.Helper()
	newRequest := func() *http.Request {
		req, err := http.NewRequest(c.method, cf.base+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatalf("%s: build request: %v", c.name, err)
		}
		if strings.HasPrefix(c.path, "/payments") && !c.noKey {
			req.Header.Set("Authorization", "Bearer "+cf.apiKey)
		}
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		return req
	}

	route, params, err := cf.router.FindRoute(newRequest())
	if err != nil {
		t.Fatalf("%s: %s %s is not in openapi.yaml: %v", c.name, c.method, c.path, err)
	}
	reqInput := &openapi3filter.RequestValidationInput{
		Request: newRequest(), PathParams: params, Route: route, Options: cf.options,
	}
	if c.validRequest {
		if err := openapi3filter.ValidateRequest(context.Background(), reqInput); err != nil {
			t.Errorf("%s: the request does not conform to openapi.yaml: %v", c.name, err)
		}
	}

	sent := newRequest()
	if tag := route.Operation.Tags; slices.Contains(tag, "admin") {
		// Matched against the spec's one server, sent to the admin listener.
		if sent, err = http.NewRequest(c.method, cf.admin+c.path, strings.NewReader(c.body)); err != nil {
			t.Fatalf("%s: build request: %v", c.name, err)
		}
		sent.Header = newRequest().Header
	}
	res, err := cf.client.Do(sent)
	if err != nil {
		t.Fatalf("%s: %s %s: %v", c.name, c.method, c.path, err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("%s: read response: %v", c.name, err)
	}
	if res.StatusCode != c.wantStatus {
		t.Errorf("%s: status = %d, want %d; body %s", c.name, res.StatusCode, c.wantStatus, body)
	}
	cf.seen[fmt.Sprintf("%s %d", route.Operation.OperationID, res.StatusCode)] = true

	resInput := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 res.StatusCode,
		Header:                 res.Header,
		Options:                cf.options,
	}
	resInput.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), resInput); err != nil {
		t.Errorf("%s: %d response does not conform to openapi.yaml: %v\nbody: %s", c.name, res.StatusCode, err, body)
	}
	return res, body
}

// TestAPIConformsToOpenAPI runs the real API and checks every kind of answer it gives
// against docs/openapi.yaml: successes, idempotent replays, each class of bad input,
// probes and the admin endpoints.
func TestAPIConformsToOpenAPI(t *testing.T) {
	t.Parallel()
	base, admin, databaseURL, apiKey := startAPI(t)
	doc, router := spec(t, base)
	cf := newConformance(t, base, router)
	cf.admin, cf.apiKey = admin, apiKey

	jsonHeaders := func(key string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "Idempotency-Key": key}
	}
	const payment = `{"user_id": "u-42", "amount": 1999, "currency": "EUR"}`
	key := "openapi-" + uuid.NewString()

	// A payment, its replay, and the same key with another body.
	res, body := cf.do(call{name: "create", method: http.MethodPost, path: "/payments",
		headers: jsonHeaders(key), body: payment, validRequest: true, wantStatus: http.StatusCreated})
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &created); err != nil || created.ID == "" {
		t.Fatalf("create: no payment id in %s (%v)", body, err)
	}
	if got, want := res.Header.Get("Location"), "/payments/"+created.ID; got != want {
		t.Errorf("create: Location = %q, want %q", got, want)
	}
	res, replayed := cf.do(call{name: "replay", method: http.MethodPost, path: "/payments",
		headers: jsonHeaders(key), body: payment, validRequest: true, wantStatus: http.StatusCreated})
	if got := res.Header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("replay: Idempotent-Replayed = %q, want true", got)
	}
	if !bytes.Equal(replayed, body) {
		t.Errorf("replay: body = %s, want the original %s", replayed, body)
	}
	cf.do(call{name: "same key, other body", method: http.MethodPost, path: "/payments",
		headers: jsonHeaders(key), body: `{"user_id": "u-42", "amount": 2000, "currency": "EUR"}`,
		validRequest: true, wantStatus: http.StatusUnprocessableEntity})

	cf.do(call{name: "get", method: http.MethodGet, path: "/payments/" + created.ID,
		validRequest: true, wantStatus: http.StatusOK})
	cf.do(call{name: "get unknown", method: http.MethodGet, path: "/payments/" + uuid.NewString(),
		validRequest: true, wantStatus: http.StatusNotFound})
	cf.do(call{name: "get malformed id", method: http.MethodGet, path: "/payments/not-a-uuid",
		wantStatus: http.StatusBadRequest})

	// The lifecycle: each transition's answers, on payments of their own.
	newPayment := func(name string) string {
		_, body := cf.do(call{name: name, method: http.MethodPost, path: "/payments",
			headers: jsonHeaders(uuid.NewString()), body: payment, validRequest: true, wantStatus: http.StatusCreated})
		var p struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &p); err != nil || p.ID == "" {
			t.Fatalf("%s: no payment id in %s (%v)", name, body, err)
		}
		return p.ID
	}
	captured, cancelled := newPayment("create to capture"), newPayment("create to cancel")
	transitionKey := "openapi-t-" + uuid.NewString()
	for _, c := range []call{
		{name: "refund before capture", path: "/payments/" + captured + "/refund", validRequest: true, wantStatus: http.StatusConflict},
		{name: "capture", path: "/payments/" + captured + "/capture", headers: map[string]string{"Idempotency-Key": transitionKey}, validRequest: true, wantStatus: http.StatusOK},
		{name: "capture replay", path: "/payments/" + captured + "/capture", headers: map[string]string{"Idempotency-Key": transitionKey}, validRequest: true, wantStatus: http.StatusOK},
		{name: "capture twice", path: "/payments/" + captured + "/capture", validRequest: true, wantStatus: http.StatusConflict},
		{name: "capture with a field", path: "/payments/" + captured + "/capture", headers: map[string]string{"Content-Type": "application/json"}, body: `{"amount": 5}`, wantStatus: http.StatusBadRequest},
		{name: "capture unknown", path: "/payments/" + uuid.NewString() + "/capture", validRequest: true, wantStatus: http.StatusNotFound},
		{name: "capture oversized", path: "/payments/" + captured + "/capture", headers: map[string]string{"Content-Type": "application/json"}, body: "{}" + strings.Repeat(" ", 5000), wantStatus: http.StatusRequestEntityTooLarge},
		{name: "capture not JSON", path: "/payments/" + captured + "/capture", headers: map[string]string{"Content-Type": "text/plain"}, body: "x", wantStatus: http.StatusUnsupportedMediaType},
		{name: "refund part", path: "/payments/" + captured + "/refund", headers: jsonHeaders(transitionKey), body: `{"amount": 500}`, validRequest: true, wantStatus: http.StatusOK},
		{name: "refund key, other amount", path: "/payments/" + captured + "/refund", headers: jsonHeaders(transitionKey), body: `{"amount": 600}`, validRequest: true, wantStatus: http.StatusUnprocessableEntity},
		{name: "refund zero", path: "/payments/" + captured + "/refund", headers: map[string]string{"Content-Type": "application/json"}, body: `{"amount": 0}`, wantStatus: http.StatusBadRequest},
		{name: "refund too much", path: "/payments/" + captured + "/refund", headers: map[string]string{"Content-Type": "application/json"}, body: `{"amount": 5000}`, validRequest: true, wantStatus: http.StatusConflict},
		{name: "refund unknown", path: "/payments/" + uuid.NewString() + "/refund", validRequest: true, wantStatus: http.StatusNotFound},
		{name: "refund oversized", path: "/payments/" + captured + "/refund", headers: map[string]string{"Content-Type": "application/json"}, body: "{}" + strings.Repeat(" ", 5000), wantStatus: http.StatusRequestEntityTooLarge},
		{name: "refund not JSON", path: "/payments/" + captured + "/refund", headers: map[string]string{"Content-Type": "text/plain"}, body: "x", wantStatus: http.StatusUnsupportedMediaType},
		{name: "refund the rest", path: "/payments/" + captured + "/refund", validRequest: true, wantStatus: http.StatusOK},
		{name: "cancel", path: "/payments/" + cancelled + "/cancel", headers: map[string]string{"Idempotency-Key": transitionKey}, validRequest: true, wantStatus: http.StatusOK},
		{name: "cancel key, other request", path: "/payments/" + cancelled + "/cancel", headers: map[string]string{"Idempotency-Key": transitionKey, "Content-Type": "application/json"}, body: "{}", validRequest: true, wantStatus: http.StatusOK},
		{name: "cancel captured", path: "/payments/" + captured + "/cancel", validRequest: true, wantStatus: http.StatusConflict},
		{name: "cancel malformed id", path: "/payments/nope/cancel", wantStatus: http.StatusBadRequest},
		{name: "cancel unknown", path: "/payments/" + uuid.NewString() + "/cancel", validRequest: true, wantStatus: http.StatusNotFound},
		{name: "cancel oversized", path: "/payments/" + cancelled + "/cancel", headers: map[string]string{"Content-Type": "application/json"}, body: "{}" + strings.Repeat(" ", 5000), wantStatus: http.StatusRequestEntityTooLarge},
		{name: "cancel not JSON", path: "/payments/" + cancelled + "/cancel", headers: map[string]string{"Content-Type": "text/plain"}, body: "x", wantStatus: http.StatusUnsupportedMediaType},
	} {
		c.method = http.MethodPost
		cf.do(c)
	}
	cf.do(call{name: "get refunded", method: http.MethodGet, path: "/payments/" + captured, validRequest: true, wantStatus: http.StatusOK})

	for _, c := range []call{
		{name: "malformed JSON", body: `{"user_id": "u-42",`, wantStatus: http.StatusBadRequest},
		{name: "unknown field", body: `{"user_id": "u-42", "amount": 1, "currency": "EUR", "tip": 1}`, wantStatus: http.StatusBadRequest},
		{name: "missing field", body: `{"user_id": "u-42", "amount": 1}`, wantStatus: http.StatusBadRequest},
		{name: "amount as string", body: `{"user_id": "u-42", "amount": "19.99", "currency": "EUR"}`, wantStatus: http.StatusBadRequest},
		{name: "negative amount", body: `{"user_id": "u-42", "amount": -5, "currency": "EUR"}`, wantStatus: http.StatusBadRequest},
		{name: "overflowing amount", body: `{"user_id": "u-42", "amount": 99999999999999999999, "currency": "EUR"}`, wantStatus: http.StatusBadRequest},
		{name: "unknown currency", body: `{"user_id": "u-42", "amount": 1, "currency": "XXY"}`, wantStatus: http.StatusBadRequest},
		{name: "blank user_id", body: `{"user_id": "   ", "amount": 1, "currency": "EUR"}`, wantStatus: http.StatusBadRequest},
		{name: "Idempotency-Key with a space", headers: map[string]string{"Idempotency-Key": "a b"}, body: payment, wantStatus: http.StatusBadRequest},
		{name: "empty Idempotency-Key", headers: map[string]string{"Idempotency-Key": ""}, body: payment, wantStatus: http.StatusBadRequest},
		{name: "oversized body", body: `{"user_id": "` + strings.Repeat("x", 5000) + `", "amount": 1, "currency": "EUR"}`, wantStatus: http.StatusRequestEntityTooLarge},
		{name: "wrong content type", headers: map[string]string{"Content-Type": "text/plain"}, body: payment, wantStatus: http.StatusUnsupportedMediaType},
	} {
		c.method, c.path = http.MethodPost, "/payments"
		headers := map[string]string{"Content-Type": "application/json"}
		for k, v := range c.headers {
			headers[k] = v
		}
		c.headers = headers
		cf.do(c)
	}

	// Without a live API key every payment operation is 401.
	for _, c := range []call{
		{name: "create without key", method: http.MethodPost, path: "/payments", headers: jsonHeaders(uuid.NewString()), body: payment},
		{name: "create with a revoked-looking key", method: http.MethodPost, path: "/payments",
			headers: map[string]string{"Content-Type": "application/json", "Authorization": "Bearer pok_NOSUCHKEY"}, body: payment},
		{name: "get without key", method: http.MethodGet, path: "/payments/" + created.ID},
		{name: "capture without key", method: http.MethodPost, path: "/payments/" + cancelled + "/capture"},
		{name: "refund without key", method: http.MethodPost, path: "/payments/" + captured + "/refund"},
		{name: "cancel without key", method: http.MethodPost, path: "/payments/" + cancelled + "/cancel"},
	} {
		c.noKey, c.wantStatus = true, http.StatusUnauthorized
		cf.do(c)
	}

	cf.do(call{name: "healthz", method: http.MethodGet, path: "/healthz", validRequest: true, wantStatus: http.StatusOK})
	cf.do(call{name: "readyz", method: http.MethodGet, path: "/readyz", validRequest: true, wantStatus: http.StatusOK})
	cf.do(call{name: "metrics", method: http.MethodGet, path: "/metrics", validRequest: true, wantStatus: http.StatusOK})

	// The relay publishes the event: GET shows it published, with its time.
	waitForEventStatus(t, cf, created.ID, "published")

	// A dead letter, to see the DLQ endpoints answer with one. How an event gets there is
	// tested in internal/outbox; here the published event is turned into one directly.
	deadLetter(t, databaseURL, created.ID)
	bearer := map[string]string{"Authorization": "Bearer " + adminToken}
	_, body = cf.do(call{name: "list DLQ", method: http.MethodGet, path: "/admin/dlq", headers: bearer,
		validRequest: true, wantStatus: http.StatusOK})
	var dlq struct {
		DeadLetters []struct {
			EventID     string `json:"event_id"`
			AggregateID string `json:"aggregate_id"`
		} `json:"dead_letters"`
	}
	if err := json.Unmarshal(body, &dlq); err != nil || len(dlq.DeadLetters) != 1 || dlq.DeadLetters[0].AggregateID != created.ID {
		t.Fatalf("list DLQ: got %s (%v), want the one dead letter of payment %s", body, err, created.ID)
	}
	cf.do(call{name: "get with failed event", method: http.MethodGet, path: "/payments/" + created.ID,
		validRequest: true, wantStatus: http.StatusOK})
	cf.do(call{name: "replay dead letter", method: http.MethodPost, path: "/admin/dlq/" + dlq.DeadLetters[0].EventID + "/replay",
		headers: bearer, validRequest: true, wantStatus: http.StatusOK})
	waitForEventStatus(t, cf, created.ID, "published")
	cf.do(call{name: "list DLQ without token", method: http.MethodGet, path: "/admin/dlq",
		wantStatus: http.StatusUnauthorized})
	cf.do(call{name: "replay unknown event", method: http.MethodPost, path: "/admin/dlq/" + uuid.NewString() + "/replay",
		headers: bearer, validRequest: true, wantStatus: http.StatusNotFound})
	cf.do(call{name: "replay malformed id", method: http.MethodPost, path: "/admin/dlq/nope/replay",
		headers: bearer, wantStatus: http.StatusBadRequest})
	cf.do(call{name: "replay without token", method: http.MethodPost, path: "/admin/dlq/" + uuid.NewString() + "/replay",
		headers: map[string]string{"Authorization": "Bearer wrong"}, wantStatus: http.StatusUnauthorized})

	// Every documented response was seen, except the failures listed in notExercised.
	var missing []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				id := op.OperationID + " " + status
				if !cf.seen[id] && !slices.Contains(notExercised, id) {
					missing = append(missing, fmt.Sprintf("%s (%s %s)", id, method, path))
				}
			}
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("documented responses no request of this test produced (add a call, or list them in notExercised):\n%s",
			strings.Join(missing, "\n"))
	}
}

// waitForEventStatus polls GET /payments/{id}, validating each answer, until the payment's
// event has the given status, for at most 30 s.
func waitForEventStatus(t *testing.T, cf *conformance, paymentID, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, body := cf.do(call{name: "get until " + want, method: http.MethodGet, path: "/payments/" + paymentID,
			validRequest: true, wantStatus: http.StatusOK})
		var p struct {
			Event *struct {
				Status string `json:"status"`
			} `json:"event"`
		}
		if err := json.Unmarshal(body, &p); err == nil && p.Event != nil && p.Event.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("payment %s: event not %s within 30 s; last answer %s", paymentID, want, body)
		}
		<-tick.C
	}
}

// deadLetter turns the payment's published event into a dead letter, as the relay does
// after the broker rejected it for the last time: status failed and a copy in outbox_dlq.
func deadLetter(t *testing.T, databaseURL, paymentID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatalf("connect to the API's database: %v", err)
	}
	defer conn.Close(ctx)
	// One transaction, so that the running relay never sees the event pending between
	// the two statements: it would claim it, publish it and move it again, and the
	// UPDATE below would find no row.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("dead-letter the event of payment %s: begin: %v", paymentID, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after the commit
	// The relay may have published the event already: then it is back from
	// outbox_published first, as if it had never been.
	if _, err := tx.Exec(ctx, `
		WITH back AS (DELETE FROM outbox_published WHERE aggregate_id = $1 RETURNING *)
		INSERT INTO outbox_events (id, seq, event_type, aggregate_id, payload, created_at)
		OVERRIDING SYSTEM VALUE
		SELECT id, seq, event_type, aggregate_id, payload, created_at FROM back`, paymentID); err != nil {
		t.Fatalf("take the event of payment %s back from outbox_published: %v", paymentID, err)
	}
	tag, err := tx.Exec(ctx, `
		WITH failed AS (
			UPDATE outbox_events
			SET status = 'failed', attempts = 5,
			    last_error = 'MESSAGE_TOO_LARGE: the request included a message larger than the max message size the server will accept'
			WHERE aggregate_id = $1
			RETURNING id, event_type, aggregate_id, payload, attempts, last_error
		)
		INSERT INTO outbox_dlq (event_id, event_type, aggregate_id, payload, attempts, last_error)
		SELECT * FROM failed`, paymentID)
	if err != nil {
		t.Fatalf("dead-letter the event of payment %s: %v", paymentID, err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("dead-letter the event of payment %s: %d rows, want 1", paymentID, tag.RowsAffected())
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("dead-letter the event of payment %s: commit: %v", paymentID, err)
	}
}
