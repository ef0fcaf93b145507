package poll

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// One slow webhook call must not cost the other dead letters of the batch their
// alert: each gets its own timeout, not what is left of the batch's query deadline.
func TestEachDeadLetterAlertHasItsOwnTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var stalled bool
	var answered []string
	webhook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a webhookAlert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("alert body: %v", err)
		}
		mu.Lock()
		first := !stalled
		stalled = true
		mu.Unlock()
		if first {
			<-r.Context().Done() // the slow one: answers only when its caller gives up
			return
		}
		mu.Lock()
		answered = append(answered, a.DedupKey)
		mu.Unlock()
	}))
	t.Cleanup(webhook.Close)
	b.cfg.AlertWebhookURL = webhook.URL
	b.cfg.AlertTimeout = 2 * b.cfg.QueryTimeout
	b.cfg.MaxRejections = 1
	r := b.newRelay(t)
	b.insert(t, newMessage(t, "a", 0), newMessage(t, "b", 0), newMessage(t, "c", 0))
	tx, claimed, err := r.claim(context.Background())
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d events, %v; want 3", len(claimed), err)
	}
	var failures []failure
	for _, e := range claimed {
		failures = append(failures, failure{ID: e.ID, Err: "MESSAGE_TOO_LARGE", Rejected: true})
	}

	// As runOnce records a batch: one QueryTimeout for everything.
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.QueryTimeout)
	defer cancel()
	dead, err := r.record(ctx, tx, nil, failures)
	if err != nil {
		t.Fatalf("record: %v", err)
	}
	r.alerter.DeadLettered(ctx, dead)

	mu.Lock()
	defer mu.Unlock()
	if len(answered) != 2 {
		t.Errorf("alerts answered by the webhook: %d (%v), want the 2 that were not stalled", len(answered), answered)
	}
}
