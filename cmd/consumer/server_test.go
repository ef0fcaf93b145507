package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// /healthz answers like the API's: JSON, so that one probe configuration fits both.
func TestHealthzAnswersJSON(t *testing.T) {
	t.Parallel()
	h := newHandler(prometheus.NewRegistry())
	rec := httptest.NewRecorder()

	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))

	if rec.Code != http.StatusOK {
		t.Errorf("GET /healthz: status = %d, want 200", rec.Code)
	}
	if got := rec.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("GET /healthz: Content-Type = %q, want application/json", got)
	}
	var body map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("GET /healthz body %q is not JSON: %v", rec.Body, err)
	}
	if diff := cmp.Diff(map[string]string{"status": "ok"}, body); diff != "" {
		t.Errorf("GET /healthz body (-want +got):\n%s", diff)
	}
}
