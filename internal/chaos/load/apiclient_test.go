package load

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The load sends the API key with every request, creations and transitions alike,
// and no Authorization header at all without one.
func TestRunLoadSendsTheAPIKey(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"pok_TESTKEY", ""} {
		var mu sync.Mutex
		seen := map[string]int{} // Authorization header -> requests
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[r.Header.Get("Authorization")]++
			mu.Unlock()
			if r.URL.Path == "/payments" {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"id":"pay-%s","event_id":"00000000-0000-4000-8000-000000000001"}`, r.Header.Get("Idempotency-Key"))
				return
			}
			w.WriteHeader(http.StatusConflict) // every transition refused: still a request
		}))
		t.Cleanup(srv.Close)

		res, err := Run(t.Context(), Config{BaseURL: srv.URL, RunID: "run", Payments: 5, APIKey: key, Lifecycle: true})
		if err != nil || res.Accepted != 5 {
			t.Fatalf("key %q: Run accepted %d (%v), want 5", key, res.Accepted, err)
		}
		mu.Lock()
		want := "Bearer " + key
		if key == "" {
			want = ""
		}
		total := 0
		for _, n := range seen {
			total += n
		}
		if diff := cmp.Diff(map[string]int{want: total}, seen); diff != "" || total <= 5 {
			t.Errorf("key %q: Authorization headers seen (-want +got), %d requests (want creations and transitions):\n%s", key, total, diff)
		}
		mu.Unlock()
	}
}
