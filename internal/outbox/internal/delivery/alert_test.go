package delivery

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/outboxtest"
)

// Webhook URLs carry their secret in the path or the query: logs show the host only.
func TestAlertWebhookErrorsNameTheHostOnly(t *testing.T) {
	t.Parallel()
	logs := &outboxtest.LogBuffer{}
	// Nothing listens on port 1: the call fails, and its error is logged.
	a := NewAlerter(AlertConfig{WebhookURL: "http://127.0.0.1:1/hooks/s3cret-path?token=s3cret-query",
		Timeout: time.Second}, logs.Logger())

	a.DeadLettered(context.Background(), []outbox.DeadLetter{{EventID: uuid.New(), LastError: "MESSAGE_TOO_LARGE"}})

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
	logs := &outboxtest.LogBuffer{}
	a := NewAlerter(AlertConfig{WebhookURL: webhook.URL, Timeout: time.Second}, logs.Logger())

	a.DeadLettered(context.Background(), []outbox.DeadLetter{{EventID: uuid.New(), LastError: "MESSAGE_TOO_LARGE"}})

	mu.Lock()
	defer mu.Unlock()
	if elsewhere != 0 {
		t.Errorf("requests that reached the other host: %d, want 0", elsewhere)
	}
	if !strings.Contains(logs.String(), "alert webhook") {
		t.Errorf("the refused redirect was not logged:\n%s", logs.String())
	}
}
