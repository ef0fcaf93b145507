package load

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// lifecycleServer accepts every creation and transition: payment n gets id pay-n, and
// each transition of a payment the next version, with an event id of its own.
func lifecycleServer(t *testing.T) *httptest.Server {
	var mu sync.Mutex
	versions := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/payments" {
			id := "pay-" + r.Header.Get("Idempotency-Key")
			versions[id] = 1
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":%q,"event_id":"ev-%s-1"}`, id, id)
			return
		}
		id := strings.Split(strings.TrimPrefix(r.URL.Path, "/payments/"), "/")[0]
		versions[id]++
		fmt.Fprintf(w, `{"event_id":"ev-%s-%d","version":%d}`, id, versions[id], versions[id])
	}))
	t.Cleanup(srv.Close)
	return srv
}

// With a StepGap, each step of a plan leaves at least that long after the previous
// answer, and each committed event says when its request left and when it was answered.
func TestLifecycleStepsWaitTheStepGap(t *testing.T) {
	t.Parallel()
	const gap = 150 * time.Millisecond
	srv := lifecycleServer(t)
	// Payment 0 has the longest plan: capture, refund 300, refund the rest.
	res, err := Run(context.Background(), Config{BaseURL: srv.URL, RunID: "gap", Payments: 1, Lifecycle: true, StepGap: gap})
	if err != nil {
		t.Fatal(err)
	}
	events := slices.Clone(res.Events)
	slices.SortFunc(events, func(a, b CommittedEvent) int { return a.Sequence - b.Sequence })
	if len(events) != 4 {
		t.Fatalf("committed events: %+v, want 4 (creation, capture, two refunds)", events)
	}
	for i, e := range events {
		if e.Sent.IsZero() || e.At.Before(e.Sent) {
			t.Errorf("event %d: sent %v, answered %v: want a send time before the answer", e.Sequence, e.Sent, e.At)
		}
		if i == 0 {
			continue
		}
		if waited := e.Sent.Sub(events[i-1].At); waited < gap {
			t.Errorf("event %d left %v after the previous answer, want at least the step gap %v", e.Sequence, waited, gap)
		}
	}
}
