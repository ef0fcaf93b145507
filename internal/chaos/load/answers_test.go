package load

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Every first attempt fails, with a 500, a 503 with Retry-After or a 503 without, and
// every retry succeeds: the totals show only 201s, and the 5xx row must still count
// the 500s and the 503s without Retry-After, the retried attempts included.
func TestRunLoadCountsEveryServerError(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	attempts := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		attempts[key]++
		first := attempts[key] == 1
		mu.Unlock()
		n, _ := strconv.Atoi(key[strings.LastIndex(key, "-")+1:])
		switch {
		case first && n%3 == 0:
			w.WriteHeader(http.StatusInternalServerError)
		case first && n%3 == 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		case first:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":"pay-%s"}`, key)
		}
	}))
	t.Cleanup(srv.Close)

	res, err := Run(t.Context(), Config{BaseURL: srv.URL, RunID: "run", Payments: 6, FirstBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Accepted != 6 {
		t.Fatalf("accepted: got %d, want 6", res.Accepted)
	}
	if res.ServerErrors.Count != 4 {
		t.Errorf("5xx answers: got %d, want 4 (two 500s, two 503s without Retry-After)", res.ServerErrors.Count)
	}
	if len(res.ServerErrors.First) != answersShown {
		t.Errorf("5xx answers named: got %q, want %d", res.ServerErrors.First, answersShown)
	}
	for _, s := range res.ServerErrors.First {
		if s != "500 POST /payments" && s != "503 without Retry-After POST /payments" {
			t.Errorf("5xx answer named %q, want its status, method and endpoint", s)
		}
	}
}

func TestEndpointHidesThePaymentID(t *testing.T) {
	t.Parallel()
	got := []string{endpoint("/payments"), endpoint("/payments/5b1c/capture"), endpoint("/healthz")}
	want := []string{"/payments", "/payments/{id}/capture", "/healthz"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}
