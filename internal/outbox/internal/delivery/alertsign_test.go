package delivery

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/outboxtest"
	"github.com/dscourse/payments-outbox/internal/webhooksig"
)

// receivedCall is one webhook call as its receiver saw it.
type receivedCall struct {
	header http.Header
	body   []byte
}

// startReceiver starts a webhook that keeps every call it receives, and answers 202.
func startReceiver(t *testing.T) (url string, calls func() []receivedCall) {
	t.Helper()
	var mu sync.Mutex
	var got []receivedCall
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, receivedCall{header: r.Header.Clone(), body: body})
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/alerts", func() []receivedCall {
		mu.Lock()
		defer mu.Unlock()
		return append([]receivedCall(nil), got...)
	}
}

func testSecret(t *testing.T) webhooksig.Secret {
	t.Helper()
	secret, err := webhooksig.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	return secret
}

// Our alert, as the receiver gets it, passes the receiver's check; the same call
// changed by one byte, with a forged signature, or checked too long before or after it
// was sent, does not.
func TestAlertWebhookCallsAreSigned(t *testing.T) {
	t.Parallel()
	url, calls := startReceiver(t)
	secret := testSecret(t)
	a := NewAlerter(AlertConfig{WebhookURL: url, Timeout: 5 * time.Second, Secret: secret}, (&outboxtest.LogBuffer{}).Logger())
	dead := outbox.DeadLetter{EventID: uuid.New(), EventType: "payment.created", LastError: "MESSAGE_TOO_LARGE"}

	a.DeadLettered(context.Background(), []outbox.DeadLetter{dead})

	got := calls()
	if len(got) != 1 {
		t.Fatalf("calls received: %d, want 1", len(got))
	}
	call := got[0]
	if err := webhooksig.Verify(secret, call.header, call.body, time.Now(), webhooksig.Tolerance); err != nil {
		t.Fatalf("the receiver refuses our alert: %v", err)
	}
	if id := call.header.Get(webhooksig.HeaderID); id != dead.EventID.String() {
		t.Errorf("webhook-id %q, want the event id %s", id, dead.EventID)
	}
	sent, err := strconv.ParseInt(call.header.Get(webhooksig.HeaderTimestamp), 10, 64)
	if err != nil {
		t.Fatalf("webhook-timestamp: %v", err)
	}
	sentAt := time.Unix(sent, 0)

	changed := append([]byte(nil), call.body...)
	changed[len(changed)/2] ^= 1
	forged := call.header.Clone()
	forged.Set(webhooksig.HeaderSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=")
	refusals := []struct {
		name   string
		header http.Header
		body   []byte
		now    time.Time
		want   error
	}{
		{"body changed by one byte", call.header, changed, sentAt, webhooksig.ErrNoSignature},
		{"forged signature", forged, call.body, sentAt, webhooksig.ErrNoSignature},
		{"replayed after the tolerance (stale)", call.header, call.body, sentAt.Add(webhooksig.Tolerance + time.Second), webhooksig.ErrTimestamp},
		{"checked before the tolerance (from the future)", call.header, call.body, sentAt.Add(-webhooksig.Tolerance - time.Second), webhooksig.ErrTimestamp},
	}
	for _, r := range refusals {
		if err := webhooksig.Verify(secret, r.header, r.body, r.now, webhooksig.Tolerance); !errors.Is(err, r.want) {
			t.Errorf("%s: Verify: %v, want %v", r.name, err, r.want)
		}
	}
}

// Every call about one dead letter carries its event id as webhook-id, so a receiver
// can deduplicate the repeats; another dead letter has another id.
func TestAlertWebhookIDIsStableAcrossCalls(t *testing.T) {
	t.Parallel()
	url, calls := startReceiver(t)
	secret := testSecret(t)
	a := NewAlerter(AlertConfig{WebhookURL: url, Timeout: 5 * time.Second, Secret: secret}, (&outboxtest.LogBuffer{}).Logger())
	dead := outbox.DeadLetter{EventID: uuid.New(), LastError: "MESSAGE_TOO_LARGE"}
	other := outbox.DeadLetter{EventID: uuid.New(), LastError: "MESSAGE_TOO_LARGE"}

	a.Call(context.Background(), dead)
	a.Call(context.Background(), dead) // the same alert sent again
	a.Call(context.Background(), other)

	got := calls()
	if len(got) != 3 {
		t.Fatalf("calls received: %d, want 3", len(got))
	}
	want := []string{dead.EventID.String(), dead.EventID.String(), other.EventID.String()}
	for i, call := range got {
		if id := call.header.Get(webhooksig.HeaderID); id != want[i] {
			t.Errorf("call %d: webhook-id %q, want %q", i, id, want[i])
		}
		if err := webhooksig.Verify(secret, call.header, call.body, time.Now(), webhooksig.Tolerance); err != nil {
			t.Errorf("call %d: the receiver refuses it: %v", i, err)
		}
	}
}

// Without a secret the calls go out as before: no signature headers.
func TestAlertWebhookWithoutASecretIsUnsigned(t *testing.T) {
	t.Parallel()
	url, calls := startReceiver(t)
	a := NewAlerter(AlertConfig{WebhookURL: url, Timeout: 5 * time.Second}, (&outboxtest.LogBuffer{}).Logger())

	a.Call(context.Background(), outbox.DeadLetter{EventID: uuid.New()})

	got := calls()
	if len(got) != 1 {
		t.Fatalf("calls received: %d, want 1", len(got))
	}
	for _, h := range []string{webhooksig.HeaderID, webhooksig.HeaderTimestamp, webhooksig.HeaderSignature} {
		if v := got[0].header.Get(h); v != "" {
			t.Errorf("unsigned call has %s: %q, want none", h, v)
		}
	}
}
