package payment_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

// transition sends POST /payments/{id}/{action} with body (none if empty) and, if key is
// not empty, an Idempotency-Key.
func (b *bundle) transition(t *testing.T, id, action, body, key string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/payments/"+id+"/"+action, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	return rec
}

// create makes a payment of 1999 EUR and returns its id.
func (b *bundle) create(t *testing.T) string {
	t.Helper()
	rec := b.post(t, validBody, "")
	if rec.Code != http.StatusCreated {
		t.Fatalf("create: status = %d, want 201; body %s", rec.Code, rec.Body)
	}
	return decode[paymentResponse](t, rec).ID
}

// mustTransition makes a transition that must succeed.
func (b *bundle) mustTransition(t *testing.T, id, action, body string) paymentResponse {
	t.Helper()
	rec := b.transition(t, id, action, body, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%s: status = %d, want 200; body %s", action, rec.Code, rec.Body)
	}
	return decode[paymentResponse](t, rec)
}

// lifecycleCounts are the rows a transition writes, and the payment's own columns.
type lifecycleCounts struct {
	Events, Refunds, Keys int
	Status                string
	Version               int
	Refunded              int64
}

func (b *bundle) lifecycle(t *testing.T, id string) lifecycleCounts {
	t.Helper()
	var c lifecycleCounts
	err := b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM outbox_events WHERE aggregate_id = $1),
		(SELECT count(*) FROM refunds WHERE payment_id = $1::uuid),
		(SELECT count(*) FROM transition_keys WHERE payment_id = $1::uuid),
		status, version, refunded_amount
		FROM payments WHERE id = $1::uuid`, id).Scan(&c.Events, &c.Refunds, &c.Keys, &c.Status, &c.Version, &c.Refunded)
	if err != nil {
		t.Fatalf("count lifecycle rows: %v", err)
	}
	return c
}

// A payment captured and refunded in two parts: each transition is one event, with the
// next sequence number, and GET lists them all in order.
func TestLifecycleCaptureAndRefundInParts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t)

	captured := b.mustTransition(t, id, "capture", "")
	if captured.Status != "captured" || captured.Version != 2 || captured.EventID == "" || captured.UpdatedAt == nil {
		t.Errorf("capture answered %+v, want status captured, version 2, an event id and updated_at", captured)
	}
	part := b.mustTransition(t, id, "refund", `{"amount": 500}`)
	if part.Status != "partially_refunded" || part.Version != 3 || part.RefundedAmount != 500 {
		t.Errorf("refund of 500 answered %+v, want partially_refunded, version 3, refunded 500", part)
	}
	rest := b.mustTransition(t, id, "refund", "") // no amount: all that is left
	if rest.Status != "refunded" || rest.Version != 4 || rest.RefundedAmount != 1999 {
		t.Errorf("refund of the rest answered %+v, want refunded, version 4, refunded 1999", rest)
	}
	if n := b.notified.Load(); n != 4 {
		t.Errorf("relay notified %d times, want 4 (one per committed event)", n)
	}

	got := decode[paymentResponse](t, b.get(t, id))
	var types []string
	var sequences []int
	for _, e := range got.Events {
		types = append(types, e.Type)
		sequences = append(sequences, e.Sequence)
	}
	if diff := cmp.Diff([]string{"PaymentCreated", "PaymentCaptured", "PaymentRefunded", "PaymentRefunded"}, types); diff != "" {
		t.Errorf("GET events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{1, 2, 3, 4}, sequences); diff != "" {
		t.Errorf("GET event sequences (-want +got):\n%s", diff)
	}
	if got.Status != "refunded" || got.Events[3].ID != rest.EventID {
		t.Errorf("GET = status %s, last event %s; want refunded and the last refund's event %s", got.Status, got.Events[3].ID, rest.EventID)
	}

	// The payloads as consumers will read them.
	rows, err := b.pool.Query(context.Background(), `
		SELECT payload->>'sequence', payload->>'amount', coalesce(payload->>'refunded_total', '')
		FROM outbox_events WHERE aggregate_id = $1 AND event_type = 'PaymentRefunded' ORDER BY seq`, id)
	if err != nil {
		t.Fatalf("select refund events: %v", err)
	}
	defer rows.Close()
	var payloads []string
	for rows.Next() {
		var seq, amount, total string
		if err := rows.Scan(&seq, &amount, &total); err != nil {
			t.Fatalf("scan: %v", err)
		}
		payloads = append(payloads, fmt.Sprintf("seq %s amount %s total %s", seq, amount, total))
	}
	if diff := cmp.Diff([]string{"seq 3 amount 500 total 500", "seq 4 amount 1499 total 1999"}, payloads); diff != "" {
		t.Errorf("refund payloads (-want +got):\n%s", diff)
	}
	if c := b.lifecycle(t, id); c.Refunds != 2 {
		t.Errorf("refund rows = %d, want 2", c.Refunds)
	}
}

func TestLifecycleCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t)
	got := b.mustTransition(t, id, "cancel", "{}")
	if got.Status != "cancelled" || got.Version != 2 {
		t.Errorf("cancel answered %+v, want cancelled, version 2", got)
	}
	var eventType, sequence string
	err := b.pool.QueryRow(context.Background(), `
		SELECT event_type, payload->>'sequence' FROM outbox_events WHERE id = $1`, got.EventID).Scan(&eventType, &sequence)
	if err != nil || eventType != "PaymentCancelled" || sequence != "2" {
		t.Errorf("cancel's event = %s sequence %s (%v), want PaymentCancelled sequence 2", eventType, sequence, err)
	}
}

// A transition the lifecycle does not allow is a 409 naming the state the payment is in,
// and writes nothing.
func TestLifecycleInvalidTransitionsAre409AndWriteNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name      string
		before    []string // transitions made first, each "action body"
		action    string
		body      string
		wantField string
		wantInMsg string
	}{
		{name: "refund before capture", action: "refund", wantField: "status", wantInMsg: "is created"},
		{name: "capture twice", before: []string{"capture"}, action: "capture", wantField: "status", wantInMsg: "is captured"},
		{name: "cancel after capture", before: []string{"capture"}, action: "cancel", wantField: "status", wantInMsg: "is captured"},
		{name: "capture after cancel", before: []string{"cancel"}, action: "capture", wantField: "status", wantInMsg: "is cancelled"},
		{name: "cancel twice", before: []string{"cancel"}, action: "cancel", wantField: "status", wantInMsg: "is cancelled"},
		{name: "refund after cancel", before: []string{"cancel"}, action: "refund", wantField: "status", wantInMsg: "is cancelled"},
		{name: "refund above the captured amount", before: []string{"capture"}, action: "refund", body: `{"amount": 2000}`, wantField: "amount", wantInMsg: "1999 left to refund"},
		{name: "refund above what is left", before: []string{"capture", `refund {"amount": 1000}`}, action: "refund", body: `{"amount": 1000}`, wantField: "amount", wantInMsg: "is partially_refunded with 999 left"},
		{name: "refund after a full refund", before: []string{"capture", "refund"}, action: "refund", body: `{"amount": 1}`, wantField: "status", wantInMsg: "is refunded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := b.create(t)
			for _, step := range tt.before {
				action, body, _ := strings.Cut(step, " ")
				b.mustTransition(t, id, action, body)
			}
			before := b.lifecycle(t, id)

			rec := b.transition(t, id, tt.action, tt.body, "key-"+strings.ReplaceAll(tt.name, " ", "-"))

			if rec.Code != http.StatusConflict {
				t.Fatalf("status = %d, want 409; body %s", rec.Code, rec.Body)
			}
			got := decode[errorResponse](t, rec)
			if got.Error.Code != "conflict" || got.Error.Field != tt.wantField || !strings.Contains(got.Error.Message, tt.wantInMsg) {
				t.Errorf("error = %+v, want code conflict, field %s, message with %q", got.Error, tt.wantField, tt.wantInMsg)
			}
			if after := b.lifecycle(t, id); after != before {
				t.Errorf("rows after the refusal = %+v, want unchanged %+v", after, before)
			}
		})
	}
}

func TestLifecycleBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t)
	b.mustTransition(t, id, "capture", "")
	tests := []struct {
		name, path, body, contentType string
		wantStatus                    int
		wantField                     string
	}{
		{name: "id not a UUID", path: "/payments/nope/refund", wantStatus: 400, wantField: "id"},
		{name: "unknown payment", path: "/payments/" + uuid.NewString() + "/capture", wantStatus: 404, wantField: "id"},
		{name: "zero amount", body: `{"amount": 0}`, wantStatus: 400, wantField: "amount"},
		{name: "negative amount", body: `{"amount": -5}`, wantStatus: 400, wantField: "amount"},
		{name: "fractional amount", body: `{"amount": 1.5}`, wantStatus: 400, wantField: "amount"},
		{name: "amount as a string", body: `{"amount": "5"}`, wantStatus: 400, wantField: "amount"},
		{name: "unknown field", body: `{"amount": 5, "reason": "x"}`, wantStatus: 400, wantField: "reason"},
		{name: "malformed JSON", body: `{"amount":`, wantStatus: 400},
		{name: "trailing data", body: `{"amount": 5} {}`, wantStatus: 400},
		{name: "not JSON", body: `amount=5`, contentType: "application/x-www-form-urlencoded", wantStatus: 415, wantField: "Content-Type"},
		{name: "capture with an amount", path: "/payments/" + id + "/capture", body: `{"amount": 5}`, wantStatus: 400, wantField: "amount"},
		{name: "too large", body: `{"amount": 5}` + strings.Repeat(" ", 8<<10), wantStatus: 413},
		// JSON null decodes into a struct as {}: a null amount must not refund everything,
		// nor a null body pass for an empty one.
		{name: "amount null", body: `{"amount": null}`, wantStatus: 400, wantField: "amount"},
		{name: "body null", body: `null`, wantStatus: 400},
		{name: "capture with a null body", path: "/payments/" + id + "/capture", body: `null`, wantStatus: 400},
		{name: "body an array", body: `[]`, wantStatus: 400},
		// And this one: a body of white space only is not JSON, and not "no body".
		{name: "cancel with a white-space body", path: "/payments/" + id + "/cancel", body: ` `, wantStatus: 400},
	}
	before := b.lifecycle(t, id)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = "/payments/" + id + "/refund"
			}
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", cmpOr(tt.contentType, "application/json"))
			rec := httptest.NewRecorder()
			b.handler.ServeHTTP(rec, req)
			if rec.Code != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.wantStatus, rec.Body)
			}
			if got := decode[errorResponse](t, rec); got.Error.Field != tt.wantField || got.Error.Message == "" {
				t.Errorf("error = %+v, want field %q and a message", got.Error, tt.wantField)
			}
		})
	}
	if after := b.lifecycle(t, id); after != before {
		t.Errorf("rows after bad requests = %+v, want unchanged %+v", after, before)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Idempotency-Keys of transitions are per payment and endpoint, with creation's rules:
// the same request replays, another request with the key is 422.
func TestLifecycleIdempotencyKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t)

	first := b.transition(t, id, "capture", "", "k1")
	again := b.transition(t, id, "capture", "", "k1")
	if first.Code != 200 || again.Code != 200 || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("capture twice with one key: %d then %d (replayed %q), want 200, 200 replayed; bodies %s %s",
			first.Code, again.Code, again.Header().Get("Idempotent-Replayed"), first.Body, again.Body)
	}
	if a, b := decode[paymentResponse](t, first).EventID, decode[paymentResponse](t, again).EventID; a != b {
		t.Errorf("replayed event id %s, want the first capture's %s", b, a)
	}
	// The same key on another endpoint of the payment is another request's key.
	if rec := b.transition(t, id, "refund", `{"amount": 100}`, "k1"); rec.Code != 200 || rec.Header().Get("Idempotent-Replayed") != "" {
		t.Errorf("refund with the capture's key: status %d replayed %q, want a new 200", rec.Code, rec.Header().Get("Idempotent-Replayed"))
	}
	if rec := b.transition(t, id, "refund", `{"amount": 100}`, "k1"); rec.Code != 200 || rec.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("same refund again: status %d replayed %q, want 200 replayed", rec.Code, rec.Header().Get("Idempotent-Replayed"))
	}
	before := b.lifecycle(t, id)
	rec := b.transition(t, id, "refund", `{"amount": 200}`, "k1")
	if rec.Code != http.StatusUnprocessableEntity || decode[errorResponse](t, rec).Error.Field != "Idempotency-Key" {
		t.Errorf("other refund with the key: status %d body %s, want 422 on Idempotency-Key", rec.Code, rec.Body)
	}
	if after := b.lifecycle(t, id); after != before || after.Events != 3 || after.Refunded != 100 {
		t.Errorf("rows = %+v, want %+v with 3 events and 100 refunded", after, before)
	}
	// Another payment does not share the keys of the first.
	other := b.create(t)
	if rec := b.transition(t, other, "capture", "", "k1"); rec.Code != 200 || rec.Header().Get("Idempotent-Replayed") != "" {
		t.Errorf("other payment's capture with k1: status %d replayed %q, want a new 200", rec.Code, rec.Header().Get("Idempotent-Replayed"))
	}
}

// race sends every request at once and returns their status codes and bodies.
func (b *bundle) race(t *testing.T, id string, requests []raceRequest) []*httptest.ResponseRecorder {
	t.Helper()
	recs := make([]*httptest.ResponseRecorder, len(requests))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range requests {
		wg.Go(func() {
			<-start
			recs[i] = b.transition(t, id, r.action, r.body, r.key)
		})
	}
	close(start)
	wg.Wait()
	return recs
}

type raceRequest struct{ action, body, key string }

// Concurrent transitions of one payment: exactly one capture or cancel wins, every
// other gets a 409 naming the state the winner left, and only the winner wrote.
func TestLifecycleConcurrentTransitionsOneWins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for round := range 5 {
		id := b.create(t)
		var requests []raceRequest
		for i := range 8 {
			action := "capture"
			if i%2 == 1 {
				action = "cancel"
			}
			requests = append(requests, raceRequest{action: action})
		}
		recs := b.race(t, id, requests)
		won, lost := 0, 0
		for _, rec := range recs {
			switch rec.Code {
			case http.StatusOK:
				won++
			case http.StatusConflict:
				lost++
				msg := decode[errorResponse](t, rec).Error.Message
				if !strings.Contains(msg, "is captured") && !strings.Contains(msg, "is cancelled") {
					t.Errorf("round %d: loser's message %q names no final state", round, msg)
				}
			default:
				t.Errorf("round %d: status %d, want 200 or 409; body %s", round, rec.Code, rec.Body)
			}
		}
		c := b.lifecycle(t, id)
		if won != 1 || lost != 7 || c.Events != 2 || c.Version != 2 {
			t.Errorf("round %d: %d won, %d lost, rows %+v; want 1 won, 7 lost, 2 events, version 2", round, won, lost, c)
		}
	}
}

// Concurrent refunds never refund more than was captured: of six refunds of 600 on 1999,
// three fit; and six copies of one keyed refund make one refund (the others replay it,
// or get 409 in_flight while it runs).
func TestLifecycleConcurrentRefundsNeverExceedTheAmount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.create(t)
	b.mustTransition(t, id, "capture", "")
	var requests []raceRequest
	for range 6 {
		requests = append(requests, raceRequest{action: "refund", body: `{"amount": 600}`})
	}
	won := 0
	for _, rec := range b.race(t, id, requests) {
		if rec.Code == http.StatusOK {
			won++
		} else if rec.Code != http.StatusConflict {
			t.Errorf("status %d, want 200 or 409; body %s", rec.Code, rec.Body)
		}
	}
	if c := b.lifecycle(t, id); won != 3 || c.Refunded != 1800 || c.Refunds != 3 || c.Version != 5 {
		t.Errorf("%d refunds won, rows %+v; want 3, 1800 refunded in 3 refunds, version 5", won, c)
	}

	keyed := b.create(t)
	b.mustTransition(t, keyed, "capture", "")
	requests = nil
	for range 6 {
		requests = append(requests, raceRequest{action: "refund", body: `{"amount": 100}`, key: "same"})
	}
	for _, rec := range b.race(t, keyed, requests) {
		if rec.Code == http.StatusConflict {
			wantInFlight(t, "keyed refund", rec)
		} else if rec.Code != http.StatusOK {
			t.Errorf("keyed refund: status %d, want 200 (first or replay) or 409 in_flight; body %s", rec.Code, rec.Body)
		}
	}
	if c := b.lifecycle(t, keyed); c.Refunds != 1 || c.Refunded != 100 || c.Keys != 1 {
		t.Errorf("six copies of one keyed refund: rows %+v, want 1 refund of 100 and 1 key", c)
	}
}
