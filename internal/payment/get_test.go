package payment_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestGetShowsTheDeliveryStateOfTheEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	publishedAt := time.Date(2026, 11, 30, 12, 0, 0, 123456000, time.UTC)
	lastError := "kafka: MESSAGE_TOO_LARGE"

	tests := []struct {
		name string
		// update moves the outbox row to the state under test, as the relay would.
		update    string
		args      []any
		wantEvent func(eventID string) *eventResponse
	}{
		{
			name: "pending",
			wantEvent: func(id string) *eventResponse {
				return &eventResponse{ID: id, Type: "PaymentCreated", Sequence: 1, Status: "pending"}
			},
		},
		{
			name: "published",
			// As the relay marks an event: moved to outbox_published.
			update: `WITH moved AS (DELETE FROM outbox_events WHERE aggregate_id = $1 RETURNING *)
				INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, published_at)
				SELECT id, seq, event_type, aggregate_id, payload, 1, 0, created_at, $2 FROM moved`,
			args: []any{publishedAt},
			wantEvent: func(id string) *eventResponse {
				return &eventResponse{ID: id, Type: "PaymentCreated", Sequence: 1, Status: "published", Attempts: 1, PublishedAt: &publishedAt}
			},
		},
		{
			name:   "failed",
			update: `UPDATE outbox_events SET status = 'failed', attempts = 5, last_error = $2 WHERE aggregate_id = $1`,
			args:   []any{lastError},
			wantEvent: func(id string) *eventResponse {
				return &eventResponse{ID: id, Type: "PaymentCreated", Sequence: 1, Status: "failed", Attempts: 5, LastError: &lastError}
			},
		},
		{
			name:      "event cleaned up",
			update:    `DELETE FROM outbox_events WHERE aggregate_id = $1`,
			wantEvent: func(string) *eventResponse { return nil },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := b.post(t, validBody, "")
			if rec.Code != http.StatusCreated {
				t.Fatalf("create: status = %d, want 201; body %s", rec.Code, rec.Body)
			}
			created := decode[paymentResponse](t, rec)
			if tt.update != "" {
				if _, err := b.pool.Exec(context.Background(), tt.update, append([]any{created.ID}, tt.args...)...); err != nil {
					t.Fatalf("update outbox row: %v", err)
				}
			}

			rec = b.get(t, created.ID)

			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200; body %s", rec.Code, rec.Body)
			}
			want := created
			want.EventID = "" // GET nests the event instead
			want.Event = tt.wantEvent(created.EventID)
			if want.Event != nil {
				want.Events = []eventResponse{*want.Event}
			}
			if diff := cmp.Diff(want, decode[paymentResponse](t, rec)); diff != "" {
				t.Errorf("GET (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetUnknownOrMalformedID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		id         string
		wantStatus int
		wantCode   string
	}{
		{id: uuid.NewString(), wantStatus: http.StatusNotFound, wantCode: "not_found"},
		{id: "not-a-uuid", wantStatus: http.StatusBadRequest, wantCode: "invalid"},
		{id: "1", wantStatus: http.StatusBadRequest, wantCode: "invalid"},
	}
	for _, tt := range tests {
		rec := b.get(t, tt.id)
		if rec.Code != tt.wantStatus {
			t.Errorf("GET %s: status = %d, want %d; body %s", tt.id, rec.Code, tt.wantStatus, rec.Body)
		}
		got := decode[errorResponse](t, rec)
		if got.Error.Code != tt.wantCode || got.Error.Field != "id" {
			t.Errorf("GET %s: error = %+v, want code %s, field id", tt.id, got.Error, tt.wantCode)
		}
	}
}

// When PostgreSQL cannot be reached the API says so with a 503 and Retry-After, so
// that clients retry with the same Idempotency-Key (the db-restart chaos scenario).
func TestDatabaseUnavailableIs503WithRetryAfter(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1 of the loopback address: every connect is refused.
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/payments?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatalf("parse pool config: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("new pool: %v", err)
	}
	t.Cleanup(pool.Close)
	b := setupWithPool(t, pool)

	for name, rec := range map[string]interface {
		Result() *http.Response
	}{
		"POST": b.post(t, validBody, "key-unavailable"),
		"GET":  b.get(t, uuid.NewString()),
	} {
		res := rec.Result()
		if res.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%s: status = %d, want 503", name, res.StatusCode)
		}
		if got := res.Header.Get("Retry-After"); got == "" {
			t.Errorf("%s: no Retry-After header", name)
		}
	}
	got := decode[errorResponse](t, b.post(t, validBody, ""))
	if got.Error.Code != "unavailable" {
		t.Errorf("error code = %q, want unavailable", got.Error.Code)
	}
}
