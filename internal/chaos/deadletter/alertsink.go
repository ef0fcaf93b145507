package deadletter

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/webhooksig"
)

// An AlertSink is the local webhook the poison scenario gives our relay as
// ALERT_WEBHOOK_URL: it stands for the pager, and keeps the dedup_key of every alert it
// receives. The relay's alerts are PagerDuty-Events-v2-like, with the dead-lettered
// event's id as dedup_key (internal/outbox/internal/delivery/alert.go). The relay
// signs them with the sink's secret (ALERT_WEBHOOK_SECRET): an alert the sink cannot
// verify, as a pager could not, is refused and not counted.
type AlertSink struct {
	server *http.Server
	url    string
	// secretText is the secret as ALERT_WEBHOOK_SECRET takes it.
	secretText string
	secret     webhooksig.Secret

	mu sync.Mutex
	// received counts the verified alerts per dedup_key; bad counts the calls that
	// were not alerts or failed verification.
	received map[string]int
	bad      int
}

// StartAlertSink listens on a free loopback port until Close.
func StartAlertSink() (*AlertSink, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for alerts: %w", err)
	}
	key := make([]byte, 32)
	rand.Read(key) // never fails (crypto/rand)
	secretText := "whsec_" + base64.StdEncoding.EncodeToString(key)
	secret, err := webhooksig.ParseSecret(secretText)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("alert secret: %w", err)
	}
	s := &AlertSink{url: "http://" + l.Addr().String() + "/alerts", secretText: secretText, secret: secret, received: map[string]int{}}
	s.server = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := s.server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.mu.Lock()
			s.bad++
			s.mu.Unlock()
		}
	}()
	return s, nil
}

func (s *AlertSink) serve(w http.ResponseWriter, r *http.Request) {
	var alert struct {
		DedupKey string `json:"dedup_key"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		// The signature covers the raw bytes: verified before they are parsed.
		err = webhooksig.Verify(s.secret, r.Header, body, time.Now(), webhooksig.Tolerance)
	}
	if err == nil {
		err = json.Unmarshal(body, &alert)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || r.Method != http.MethodPost || alert.DedupKey == "" {
		s.bad++
		http.Error(w, "want a POST of a signed JSON alert with a dedup_key", http.StatusBadRequest)
		return
	}
	s.received[alert.DedupKey]++
	w.WriteHeader(http.StatusAccepted)
}

// Env is the relay's settings that point its alerts at the sink, signed with the
// sink's secret.
func (s *AlertSink) Env() []string {
	return []string{"ALERT_WEBHOOK_URL=" + s.url, "ALERT_WEBHOOK_SECRET=" + s.secretText}
}

// Received returns how many verified alerts each dedup_key got, and how many calls
// were not alerts or failed verification.
func (s *AlertSink) Received() (map[string]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := make(map[string]int, len(s.received))
	for k, n := range s.received {
		got[k] = n
	}
	return got, s.bad
}

// Close stops listening; calling it again does nothing.
func (s *AlertSink) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.server.Shutdown(ctx)
}
