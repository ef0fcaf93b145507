package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dscourse/payments-outbox/internal/outbox/poll"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// Liveness and readiness answer different questions: with the database unreachable
// the process is alive (do not restart it) but not ready (send no traffic).
func TestHealthzAndReadyzWithDatabaseDown(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: every connect is refused.
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/payments?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatalf("new pool: %v", err)
	}
	t.Cleanup(pool.Close)
	reg := prometheus.NewRegistry()
	h, admin := newTestHandlers(t, config{}, pool, reg)

	tests := []struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		{"/healthz", http.StatusOK, `"status":"ok"`},
		{"/readyz", http.StatusServiceUnavailable, `"code":"unavailable"`},
		{"/no-such-route", http.StatusNotFound, `"code":"not_found"`},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), tt.wantBody) {
			t.Errorf("GET %s = %d %s, want %d with %s", tt.path, rec.Code, rec.Body, tt.wantStatus, tt.wantBody)
		}
		if got := rec.Header().Get("Content-Type"); got != "application/json" {
			t.Errorf("GET %s: Content-Type = %q, want application/json", tt.path, got)
		}
	}

	// /metrics is not on the public listener, only on the admin one.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /metrics on the API = %d, want 404 (it is served on ADMIN_ADDR)", rec.Code)
	}
	// Unknown paths share one metric series instead of one per path.
	rec = httptest.NewRecorder()
	admin.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`http_requests_total{code="404",method="GET",route="unmatched"} 2`,
		`http_requests_total{code="503",method="GET",route="/readyz"} 1`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// The admin endpoints exist only with ADMIN_TOKEN set, and then only with the token.
func TestAdminEndpointsNeedTheConfiguredToken(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t, migrations.Payments)
	unknownEvent := "/admin/dlq/00000000-0000-4000-8000-000000000000/replay"
	tests := []struct {
		name, configured, sent string
		method, path           string
		want                   int
	}{
		{"no token configured: no list", "", "", http.MethodGet, "/admin/dlq", http.StatusNotFound},
		{"no token configured, a bearer sent anyway", "", "anything", http.MethodGet, "/admin/dlq", http.StatusNotFound},
		{"no token configured: no replay", "", "", http.MethodPost, unknownEvent, http.StatusNotFound},
		{"missing token", testAdminToken, "", http.MethodGet, "/admin/dlq", http.StatusUnauthorized},
		{"wrong token", testAdminToken, "guess", http.MethodGet, "/admin/dlq", http.StatusUnauthorized},
		{"wrong token on replay", testAdminToken, "guess", http.MethodPost, unknownEvent, http.StatusUnauthorized},
		{"right token", testAdminToken, testAdminToken, http.MethodGet, "/admin/dlq", http.StatusOK},
		{"right token, replay of an unknown event", testAdminToken, testAdminToken, http.MethodPost, unknownEvent, http.StatusNotFound},
		{"no token configured: no profiles", "", "", http.MethodGet, "/debug/pprof/heap", http.StatusNotFound},
		{"wrong token on profiles", testAdminToken, "guess", http.MethodGet, "/debug/pprof/heap", http.StatusUnauthorized},
		{"right token, heap profile", testAdminToken, testAdminToken, http.MethodGet, "/debug/pprof/heap", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api, h := newTestHandlers(t, config{AdminToken: tt.configured}, pool, prometheus.NewRegistry())
			onAPI := httptest.NewRecorder()
			api.ServeHTTP(onAPI, httptest.NewRequest(tt.method, tt.path, nil))
			if onAPI.Code != http.StatusNotFound && onAPI.Code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s on the API listener = %d, want 404 (admin endpoints are on ADMIN_ADDR only)", tt.method, tt.path, onAPI.Code)
			}
			req := httptest.NewRequest(tt.method, tt.path, nil)
			if tt.sent != "" {
				req.Header.Set("Authorization", "Bearer "+tt.sent)
			}
			rec := httptest.NewRecorder()

			h.ServeHTTP(rec, req)

			if rec.Code != tt.want {
				t.Errorf("%s %s = %d %s, want %d", tt.method, tt.path, rec.Code, rec.Body, tt.want)
			}
			if tt.want == http.StatusOK && tt.path == "/admin/dlq" {
				var body struct {
					DeadLetters []json.RawMessage `json:"dead_letters"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.DeadLetters == nil {
					t.Errorf("GET /admin/dlq body %s: want {\"dead_letters\": [...]} (decode error: %v)", rec.Body, err)
				}
			}
		})
	}
}

// Readiness covers the relay too: payments taken while it is not running would wait
// in the outbox for a relay that is not coming.
func TestReadyzReportsAStoppedRelay(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t, migrations.Payments)
	running, stopped := make(chan struct{}), make(chan struct{})
	close(stopped)
	tests := []struct {
		name         string
		relayStopped chan struct{}
		wantStatus   int
		wantBody     string
	}{
		{"relay running", running, http.StatusOK, `"status":"ready"`},
		{"relay stopped", stopped, http.StatusServiceUnavailable, `the outbox relay is not running`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := newTestHandlersWithRelay(t, config{}, pool, prometheus.NewRegistry(), tt.relayStopped)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("GET /readyz = %d %s, want %d with %s", rec.Code, rec.Body, tt.wantStatus, tt.wantBody)
			}
		})
	}
}

// testAdminToken is an ADMIN_TOKEN of the length Validate asks for.
const testAdminToken = "0123456789abcdef0123456789abcdef"

// newTestHandlers builds the API's and the admin listener's routes with a relay that
// is never run, but reported running: the handlers only call its Notify.
func newTestHandlers(t *testing.T, cfg config, pool *pgxpool.Pool, reg *prometheus.Registry) (api, admin http.Handler) {
	t.Helper()
	return newTestHandlersWithRelay(t, cfg, pool, reg, make(chan struct{}))
}

// newTestHandlersWithRelay is newTestHandlers with the relay reported stopped once
// relayStopped is closed.
func newTestHandlersWithRelay(t *testing.T, cfg config, pool *pgxpool.Pool, reg *prometheus.Registry, relayStopped <-chan struct{}) (api, admin http.Handler) {
	t.Helper()
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	metrics, err := poll.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("outbox metrics: %v", err)
	}
	relay, err := poll.NewRelay(pool, poll.Config{Brokers: []string{"127.0.0.1:1"}, Topic: "unused"}, logger, metrics)
	if err != nil {
		t.Fatalf("new relay: %v", err)
	}
	httpMetrics, err := newHTTPMetrics(reg)
	if err != nil {
		t.Fatalf("http metrics: %v", err)
	}
	nudges := relayNudges{created: relay.Notify, replayed: relay.Notify}
	return newHandler(cfg, logger, pool, httpMetrics, nil, nudges, relayStopped, nil),
		newAdminHandler(cfg, logger, pool, reg, httpMetrics, nudges)
}
