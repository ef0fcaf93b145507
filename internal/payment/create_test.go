package payment_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const validBody = `{"user_id": "u-42", "amount": 1999, "currency": "EUR"}`

func TestCreateWritesPaymentAndEventInOneTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := time.Now().UTC().Truncate(time.Microsecond)

	rec := b.post(t, validBody, "")

	if rec.Code != http.StatusCreated {
		t.Fatalf("status = %d, want 201; body %s", rec.Code, rec.Body)
	}
	got := decode[paymentResponse](t, rec)
	if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now()) || got.CreatedAt.Location() != time.UTC {
		t.Errorf("created_at = %v, want UTC between %v and now", got.CreatedAt, before)
	}
	if loc := rec.Header().Get("Location"); loc != "/payments/"+got.ID {
		t.Errorf("Location = %q, want /payments/%s", loc, got.ID)
	}
	want := paymentResponse{ID: got.ID, UserID: "u-42", Amount: 1999, Currency: "EUR", CreatedAt: got.CreatedAt, EventID: got.EventID, Status: "created", Version: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	if n := b.notified.Load(); n != 1 {
		t.Errorf("relay notified %d times, want 1", n)
	}

	// The stored rows: the payment as answered, and its event, pending, keyed by the
	// payment id, with the v1 payload.
	ctx := context.Background()
	var stored paymentResponse
	err := b.pool.QueryRow(ctx, `SELECT id::text, user_id, amount, currency, created_at, status, version, refunded_amount FROM payments`).
		Scan(&stored.ID, &stored.UserID, &stored.Amount, &stored.Currency, &stored.CreatedAt, &stored.Status, &stored.Version, &stored.RefundedAmount)
	if err != nil {
		t.Fatalf("select payment: %v", err)
	}
	stored.CreatedAt = stored.CreatedAt.UTC()
	stored.EventID = got.EventID
	if diff := cmp.Diff(got, stored); diff != "" {
		t.Errorf("stored payment (-answered +stored):\n%s", diff)
	}

	type eventRow struct {
		ID, Type, AggregateID, Status string
		Payload                       map[string]any
		CreatedAt                     time.Time
	}
	var event eventRow
	err = b.pool.QueryRow(ctx, `SELECT id::text, event_type, aggregate_id, status, payload, created_at FROM outbox_events`).
		Scan(&event.ID, &event.Type, &event.AggregateID, &event.Status, &event.Payload, &event.CreatedAt)
	if err != nil {
		t.Fatalf("select outbox event: %v", err)
	}
	event.CreatedAt = event.CreatedAt.UTC()
	wantEvent := eventRow{
		ID: got.EventID, Type: "PaymentCreated", AggregateID: got.ID, Status: "pending",
		Payload: map[string]any{
			"payment_id": got.ID, "user_id": "u-42", "amount": float64(1999), "currency": "EUR",
			"created_at": got.CreatedAt.Format(time.RFC3339Nano),
		},
		CreatedAt: got.CreatedAt,
	}
	if diff := cmp.Diff(wantEvent, event); diff != "" {
		t.Errorf("outbox event (-want +got):\n%s", diff)
	}
}

// The heart of the pattern: when the outbox insert fails, the payment is rolled back
// with it, and the client gets a 5xx that reveals nothing about the cause.
func TestCreateRollsBackPaymentWhenOutboxInsertFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A fault injected in this test's own database: every outbox insert fails.
	_, err := b.pool.Exec(context.Background(), `
		CREATE FUNCTION fail_outbox_insert() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected fault: outbox insert refused'; END $$;
		CREATE TRIGGER fail_outbox_insert BEFORE INSERT ON outbox_events
		FOR EACH ROW EXECUTE FUNCTION fail_outbox_insert();`)
	if err != nil {
		t.Fatalf("install fault: %v", err)
	}

	for _, key := range []string{"", "key-atomicity"} {
		rec := b.post(t, validBody, key)

		if rec.Code != http.StatusInternalServerError {
			t.Errorf("key %q: status = %d, want 500; body %s", key, rec.Code, rec.Body)
		}
		got := decode[errorResponse](t, rec)
		if got.Error.Code != "internal" || got.Error.Message != "internal error" {
			t.Errorf("key %q: error = %+v, want code internal, message \"internal error\"", key, got.Error)
		}
	}
	if got, want := b.count(t), (rowCounts{}); got != want {
		t.Errorf("rows after failed outbox inserts = %+v, want %+v", got, want)
	}
	if n := b.notified.Load(); n != 0 {
		t.Errorf("relay notified %d times after failed transactions, want 0", n)
	}
	// The cause is in the log for the operator.
	if logs := b.logs.String(); !strings.Contains(logs, "injected fault") {
		t.Errorf("log does not mention the cause; log:\n%s", logs)
	}
}

func TestIdempotencyKeyReplaysTheFirstResponse(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first := b.post(t, validBody, "key-replay")
	// Same request, written differently: key order and whitespace do not matter.
	second := b.post(t, `{"currency":"EUR","amount":1999,"user_id":"u-42"}`, "key-replay")

	if first.Code != http.StatusCreated || second.Code != http.StatusCreated {
		t.Fatalf("statuses = %d, %d, want 201, 201; bodies %s / %s", first.Code, second.Code, first.Body, second.Body)
	}
	if diff := cmp.Diff(first.Body.String(), second.Body.String()); diff != "" {
		t.Errorf("replayed body differs (-first +replay):\n%s", diff)
	}
	if got := first.Header().Get("Idempotent-Replayed"); got != "" {
		t.Errorf("first response Idempotent-Replayed = %q, want none", got)
	}
	if got := second.Header().Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("replay Idempotent-Replayed = %q, want true", got)
	}
	if got, want := b.count(t), (rowCounts{Payments: 1, Events: 1, Keys: 1}); got != want {
		t.Errorf("rows = %+v, want %+v", got, want)
	}
	if n := b.notified.Load(); n != 1 {
		t.Errorf("relay notified %d times, want 1 (replays commit nothing)", n)
	}
}

func TestIdempotencyKeyWithDifferentBodyIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if rec := b.post(t, validBody, "key-reuse"); rec.Code != http.StatusCreated {
		t.Fatalf("first status = %d, want 201; body %s", rec.Code, rec.Body)
	}

	rec := b.post(t, `{"user_id": "u-42", "amount": 2000, "currency": "EUR"}`, "key-reuse")

	if rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("status = %d, want 422; body %s", rec.Code, rec.Body)
	}
	got := decode[errorResponse](t, rec)
	if got.Error.Code != "unprocessable" || got.Error.Field != "Idempotency-Key" {
		t.Errorf("error = %+v, want code unprocessable, field Idempotency-Key", got.Error)
	}
	if got, want := b.count(t), (rowCounts{Payments: 1, Events: 1, Keys: 1}); got != want {
		t.Errorf("rows = %+v, want %+v", got, want)
	}
}

type responseSummary struct {
	Status   int
	Body     string
	Replayed string
}

// Different keys are different payments, also when the bodies are equal.
func TestDistinctIdempotencyKeysCreateDistinctPayments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := map[string]bool{}
	for i := range 3 {
		rec := b.post(t, validBody, fmt.Sprintf("key-%d", i))
		if rec.Code != http.StatusCreated {
			t.Fatalf("status = %d, want 201; body %s", rec.Code, rec.Body)
		}
		var p paymentResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("decode: %v", err)
		}
		ids[p.ID] = true
	}
	if len(ids) != 3 {
		t.Errorf("distinct payment ids = %d, want 3", len(ids))
	}
	if got, want := b.count(t), (rowCounts{Payments: 3, Events: 3, Keys: 3}); got != want {
		t.Errorf("rows = %+v, want %+v", got, want)
	}
}
