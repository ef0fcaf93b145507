package load

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A real HTTP server that answers 503 to the first attempt of every key, the way the
// API does while PostgreSQL restarts: every payment must end accepted, after exactly
// one retry, with the same Idempotency-Key.
func TestRunLoadRetriesWithTheSameKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	attempts := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		attempts[key]++
		n := attempts[key]
		mu.Unlock()
		if n == 1 {
			// Half of the 503s say when to come back, as the contract asks.
			if strings.ContainsAny(key[len(key)-1:], "02468") {
				w.Header().Set("Retry-After", "1")
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay-%s"}`, key)
	}))
	t.Cleanup(srv.Close)

	res, err := Run(t.Context(), Config{BaseURL: srv.URL, RunID: "run", Payments: 10, FirstBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Sent != 10 || res.Accepted != 10 || res.Rejected != 0 || res.Retries != 10 {
		t.Errorf("sent/accepted/rejected/retries: got %d/%d/%d/%d, want 10/10/0/10", res.Sent, res.Accepted, res.Rejected, res.Retries)
	}
	if diff := cmp.Diff(map[string]int{"status 503 with Retry-After": 5, "status 503 without Retry-After": 5}, res.RetryReasons); diff != "" {
		t.Errorf("retry reasons (-want +got):\n%s", diff)
	}
	if len(res.AcceptedAt) != len(res.PaymentIDs) {
		t.Fatalf("accepted times: got %d, want one per payment id (%d)", len(res.AcceptedAt), len(res.PaymentIDs))
	}
	for i, at := range res.AcceptedAt {
		if at.Before(res.Started) || at.After(res.Ended) {
			t.Errorf("payment %s accepted at %v, want within the load (%v to %v)", res.PaymentIDs[i], at, res.Started, res.Ended)
		}
	}
	// Every attempt is recorded with its answer: ten 503s, then ten 201s.
	refused := map[string]int{}
	for _, a := range res.Attempts {
		refused[a.Refused]++
		if a.Sent.Before(res.Started) || a.Answered.Before(a.Sent) || a.Answered.After(res.Ended) {
			t.Errorf("attempt sent %v, answered %v: want within the load (%v to %v), answered after sent", a.Sent, a.Answered, res.Started, res.Ended)
		}
	}
	if diff := cmp.Diff(map[string]int{"": 10, "status 503 with Retry-After": 5, "status 503 without Retry-After": 5}, refused); diff != "" {
		t.Errorf("attempts by refusal (-want +got):\n%s", diff)
	}
	want := map[string]int{}
	for n := range 10 {
		want[fmt.Sprintf("run-%d", n)] = 2
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, attempts); diff != "" {
		t.Errorf("attempts per Idempotency-Key (-want +got):\n%s", diff)
	}
}

// A 4xx is final: no retry, counted as rejected with its status.
func TestRunLoadDoesNotRetryClientErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnprocessableEntity)
	}))
	t.Cleanup(srv.Close)
	res, err := Run(t.Context(), Config{BaseURL: srv.URL, RunID: "run", Payments: 3})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if diff := cmp.Diff(map[string]int{"status 422": 3}, res.RejectReasons); diff != "" || res.Retries != 0 {
		t.Errorf("reject reasons (-want +got):\n%s; retries got %d, want 0", diff, res.Retries)
	}
}

// With Bursts, the payments leave in groups: payment n belongs to burst n*Bursts/Payments
// and leaves at that burst's share of the span, together with the rest of its burst
// (evenly paced sends would space the two payments of a burst by span/6 = 500 ms).
func TestRunLoadSendsInBursts(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived[r.Header.Get("Idempotency-Key")] = time.Now()
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay"}`)
	}))
	t.Cleanup(srv.Close)

	const span = 3 * time.Second
	res, err := Run(t.Context(), Config{BaseURL: srv.URL, RunID: "run", Payments: 6, Span: span, Bursts: 3})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Accepted != 6 {
		t.Fatalf("accepted = %d, want 6", res.Accepted)
	}
	mu.Lock()
	defer mu.Unlock()
	for n := range 6 {
		burst := n * 3 / 6
		earliest := res.Started.Add(span * time.Duration(burst) / 3)
		latest := earliest.Add(400 * time.Millisecond)
		if got := arrived[fmt.Sprintf("run-%d", n)]; got.Before(earliest) || got.After(latest) {
			t.Errorf("payment %d (burst %d) arrived %v after the start, want between %v and %v",
				n, burst, got.Sub(res.Started), earliest.Sub(res.Started), latest.Sub(res.Started))
		}
	}
}

// With replicas, a payment's attempts go round the replicas, as a load balancer would.
func TestLoadSpreadsOverReplicas(t *testing.T) {
	t.Parallel()
	cfg := Config{BaseURL: "a", Replicas: []string{"b"}}
	var got []string
	for i := range 4 {
		got = append(got, cfg.url(i))
	}
	if diff := cmp.Diff([]string{"a", "b", "a", "b"}, got); diff != "" {
		t.Errorf("urls (-want +got):\n%s", diff)
	}
	if one := (Config{BaseURL: "a"}); one.url(3) != "a" {
		t.Errorf("url without replicas = %q, want a", one.url(3))
	}
}
