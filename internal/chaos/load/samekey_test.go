package load

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// sameKeyServer answers creations and captures. A correct one replays the first answer
// of a key; a split one, like a service whose key check runs outside its write
// transaction, makes a new payment (a new event) for every request of a key that
// arrives while another is in flight. Every request waits until a second one of its
// key arrives, or 200 ms, so that the test sees whether the copies were sent at once.
func sameKeyServer(t *testing.T, split bool) (*httptest.Server, func() (concurrent int)) {
	var mu sync.Mutex
	answers := map[string]string{}
	inFlight := map[string]int{}
	arrived := map[string]chan struct{}{}
	concurrent := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		inFlight[key]++
		switch {
		case inFlight[key] == 1:
			arrived[key] = make(chan struct{})
		default:
			concurrent++
			select {
			case <-arrived[key]:
			default:
				close(arrived[key])
			}
		}
		wait := arrived[key]
		mu.Unlock()
		select {
		case <-wait:
		case <-time.After(200 * time.Millisecond):
		}
		mu.Lock()
		defer mu.Unlock()
		inFlight[key]--
		id, ok := answers[key]
		if !ok || split {
			id = fmt.Sprintf("%s-%d", key, len(answers))
			answers[key+id] = id
			if !ok {
				answers[key] = id
			}
		}
		if strings.HasSuffix(r.URL.Path, "/payments") {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":"pay-%s"}`, id)
			return
		}
		fmt.Fprintf(w, `{"event_id":"ev-%s","version":2}`, id)
	}))
	t.Cleanup(srv.Close)
	return srv, func() int { mu.Lock(); defer mu.Unlock(); return concurrent }
}

func TestRunLoadSendsSameKeyAtOnce(t *testing.T) {
	t.Parallel()
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) {
			t.Parallel()
			srv, concurrent := sameKeyServer(t, split)
			// Payments 1 and 3 (n % 2 == 1) are sent by three clients, and with the
			// lifecycle so is their capture (plans 1 and 3: a capture, and a capture
			// racing a cancel, which this server both answers 200).
			res, err := Run(t.Context(), Config{BaseURL: srv.URL, RunID: "run", Payments: 4, SameKeyEvery: 2, Lifecycle: true, FirstBackoff: 10 * time.Millisecond})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if res.Accepted != 4 || len(res.PaymentIDs) != 4 {
				t.Errorf("accepted: got %d (%d ids), want 4: copies must not count in the totals", res.Accepted, len(res.PaymentIDs))
			}
			if got := res.Transitions.Requests; got != 7 {
				t.Errorf("transition requests: got %d, want 7 (the plans of payments 0 to 3, each request once): copies must not count", got)
			}
			if res.SameKey.Keys != 5 {
				t.Errorf("same-key keys: got %d, want 5 (2 creations, 3 transitions)", res.SameKey.Keys)
			}
			if got := concurrent(); got < 5 {
				t.Errorf("requests that found another of their key in flight: got %d, want at least 5", got)
			}
			wantSplit := 0
			if split {
				wantSplit = 5
			}
			if res.SameKey.Split != wantSplit {
				t.Errorf("split keys: got %d (%s), want %d", res.SameKey.Split, res.SameKey.FirstSplit, wantSplit)
			}
		})
	}
}
