package outbox

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
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
		var a alertEvent
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
	r.alerter.deadLettered(ctx, dead)

	mu.Lock()
	defer mu.Unlock()
	if len(answered) != 2 {
		t.Errorf("alerts answered by the webhook: %d (%v), want the 2 that were not stalled", len(answered), answered)
	}
}

// Webhook URLs carry their secret in the path or the query: logs show the host only.
func TestAlertWebhookErrorsNameTheHostOnly(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	// Nothing listens on port 1: the call fails, and its error is logged.
	a := newAlerter(RelayConfig{AlertWebhookURL: "http://127.0.0.1:1/hooks/s3cret-path?token=s3cret-query",
		AlertTimeout: time.Second}, logs.logger())

	a.deadLettered(context.Background(), []DeadLetter{{EventID: uuid.New(), LastError: "MESSAGE_TOO_LARGE"}})

	got := logs.String()
	if strings.Contains(got, "s3cret") {
		t.Errorf("logs reveal the webhook URL's secret:\n%s", got)
	}
	if !strings.Contains(got, "alert webhook") || !strings.Contains(got, "127.0.0.1:1") {
		t.Errorf("logs lack the webhook failure with its host:\n%s", got)
	}
}

// A redirect to another host would carry the alert body there: refused, and logged.
func TestAlertWebhookRefusesRedirectsToAnotherHost(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	elsewhere := 0
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		elsewhere++
		mu.Unlock()
	}))
	t.Cleanup(other.Close)
	webhook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// 307 keeps the method and the body.
		http.Redirect(w, r, other.URL+"/collect", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(webhook.Close)
	logs := &logBuffer{}
	a := newAlerter(RelayConfig{AlertWebhookURL: webhook.URL, AlertTimeout: time.Second}, logs.logger())

	a.deadLettered(context.Background(), []DeadLetter{{EventID: uuid.New(), LastError: "MESSAGE_TOO_LARGE"}})

	mu.Lock()
	defer mu.Unlock()
	if elsewhere != 0 {
		t.Errorf("requests that reached the other host: %d, want 0", elsewhere)
	}
	if !strings.Contains(logs.String(), "alert webhook") {
		t.Errorf("the refused redirect was not logged:\n%s", logs.String())
	}
}
