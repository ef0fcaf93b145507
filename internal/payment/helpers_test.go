package payment_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/internal/payment"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// bundle is what setup gives a test: the payment routes on a fresh database of its own.
type bundle struct {
	pool    *pgxpool.Pool
	handler http.Handler
	// notified counts calls of the relay wake-up.
	notified *atomic.Int64
	logs     *syncBuffer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWithPool(t, testenv.NewPool(t, migrations.Payments))
}

func setupWithPool(t *testing.T, pool *pgxpool.Pool) *bundle {
	t.Helper()
	b := &bundle{pool: pool, notified: new(atomic.Int64), logs: new(syncBuffer)}
	r := chi.NewRouter()
	logger := slog.New(slog.NewJSONHandler(b.logs, nil))
	store := payment.NewTracedStore(pool, nil)
	// The routes as cmd/api/routes.go mounts them.
	r.Method(http.MethodPost, "/payments", payment.HandleCreate(logger, store, func() { b.notified.Add(1) }))
	r.Method(http.MethodGet, "/payments/{id}", payment.HandleGet(logger, store))
	for _, action := range []string{payment.ActionCapture, payment.ActionRefund, payment.ActionCancel} {
		r.Method(http.MethodPost, "/payments/{id}/"+action, payment.HandleTransition(logger, store, action, func() { b.notified.Add(1) }))
	}
	// Every request acts for the default merchant, or the one of its testMerchantHeader,
	// as if merchant.RequireAPIKey had authenticated it; cmd/api's tests cover the keys.
	b.handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		id := merchant.DefaultID
		if h := req.Header.Get(testMerchantHeader); h != "" {
			id = uuid.MustParse(h)
		}
		r.ServeHTTP(w, req.WithContext(merchant.WithID(req.Context(), id)))
	})
	return b
}

// testMerchantHeader names, in a test's request, the merchant it acts for.
const testMerchantHeader = "X-Test-Merchant"

// post sends POST /payments with a JSON body and, if key is not empty, an
// Idempotency-Key.
func (b *bundle) post(t *testing.T, body, key string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, req)
	return rec
}

func (b *bundle) get(t *testing.T, id string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	b.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/payments/"+id, nil))
	return rec
}

// count returns the number of rows in each table the write path touches.
func (b *bundle) count(t *testing.T) rowCounts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c rowCounts
	err := b.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM payments),
		(SELECT count(*) FROM outbox_events),
		(SELECT count(*) FROM idempotency_keys)`).Scan(&c.Payments, &c.Events, &c.Keys)
	if err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return c
}

type rowCounts struct{ Payments, Events, Keys int }

// paymentResponse is the JSON of a payment as a client decodes it.
type paymentResponse struct {
	ID        string         `json:"id"`
	UserID    string         `json:"user_id"`
	Amount    int64          `json:"amount"`
	Currency  string         `json:"currency"`
	CreatedAt time.Time      `json:"created_at"`
	EventID   string         `json:"event_id"`
	Event     *eventResponse `json:"event"`

	Status         string          `json:"status"`
	Version        int             `json:"version"`
	RefundedAmount int64           `json:"refunded_amount"`
	UpdatedAt      *time.Time      `json:"updated_at"`
	Events         []eventResponse `json:"events"`
}

type eventResponse struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	Sequence    int        `json:"sequence"`
	Status      string     `json:"status"`
	Attempts    int        `json:"attempts"`
	PublishedAt *time.Time `json:"published_at"`
	LastError   *string    `json:"last_error"`
}

type errorResponse struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

// decode parses a JSON response body strictly, failing the test on anything else.
func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json; body %s", ct, rec.Body)
	}
	var v T
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, rec.Body, err)
	}
	return v
}

// syncBuffer is a log sink that handlers write to from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

var _ io.Writer = (*syncBuffer)(nil)
