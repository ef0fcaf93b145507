package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
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
	relay := &relayHandle{Notify: func() {}, Stop: func(context.Context) error { return nil }}
	h := newHandler(slog.New(slog.NewJSONHandler(io.Discard, nil)), pool, prometheus.NewRegistry(), relay, nil)

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
	}

	// Unknown paths share one metric series instead of one per path.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`http_requests_total{code="404",method="GET",route="unmatched"} 1`,
		`http_requests_total{code="503",method="GET",route="/readyz"} 1`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
