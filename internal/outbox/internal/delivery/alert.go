package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/webhooksig"
)

// AlertConfig says where an Alerter posts. Both relays fill it from their config's
// fields of the same names.
type AlertConfig struct {
	// WebhookURL, when set, receives a POST for every dead-lettered event.
	WebhookURL string
	// RoutingKey is copied into the body's routing_key.
	RoutingKey string
	// Timeout bounds one webhook call.
	Timeout time.Duration
	// Secret, when set, signs every call as Standard Webhooks does (package
	// webhooksig), with the dead letter's event id as webhook-id; the zero Secret
	// sends the calls unsigned.
	Secret webhooksig.Secret
}

// An Alerter tells operators about dead-lettered events: always a structured Error log
// line, and, when configured, a webhook call with a PagerDuty-Events-v2-like body. Both
// relays use it: one receiver and one runbook serve both modes.
type Alerter struct {
	webhookURL string
	// webhookHost is all that logs show of webhookURL: webhook URLs carry their
	// secret in the path or the query.
	webhookHost string
	routingKey  string
	source      string
	timeout     time.Duration
	secret      webhooksig.Secret
	client      *http.Client
	logger      *slog.Logger
}

// NewAlerter returns an alerter that logs on logger and posts as cfg says.
func NewAlerter(cfg AlertConfig, logger *slog.Logger) *Alerter {
	source, err := os.Hostname()
	if err != nil {
		source = "outbox-relay"
	}
	host := "the alert webhook" // for a URL that does not parse, which post reports
	if u, err := url.Parse(cfg.WebhookURL); err == nil {
		host = u.Host
	}
	return &Alerter{
		webhookURL:  cfg.WebhookURL,
		webhookHost: host,
		routingKey:  cfg.RoutingKey,
		source:      source,
		timeout:     cfg.Timeout,
		secret:      cfg.Secret,
		client:      &http.Client{CheckRedirect: sameHostRedirects},
		logger:      logger,
	}
}

// sameHostRedirects lets the webhook client follow a redirect only to the host and
// scheme it was configured with. A 307 or 308 resends the alert body, and an alert
// carries event details and the routing key: a webhook that sends it elsewhere is
// misconfigured or hijacked, and the failure is logged instead.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	if req.URL.Host != first.Host || req.URL.Scheme != first.Scheme {
		return fmt.Errorf("refused a redirect to %s://%s", req.URL.Scheme, req.URL.Host)
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// alertEvent is the webhook body, shaped like a PagerDuty Events API v2 trigger.
// dedup_key is the event id, so repeated alerts for one event open one incident.
type alertEvent struct {
	RoutingKey  string       `json:"routing_key,omitempty"`
	EventAction string       `json:"event_action"`
	DedupKey    string       `json:"dedup_key"`
	Payload     alertPayload `json:"payload"`
}

type alertPayload struct {
	Summary       string            `json:"summary"`
	Source        string            `json:"source"`
	Severity      string            `json:"severity"`
	CustomDetails outbox.DeadLetter `json:"custom_details"`
}

// DeadLettered raises the alerts for the events one batch dead-lettered, and returns
// within one AlertTimeout. The webhook calls run side by side, each under its own
// AlertTimeout, detached from ctx's deadline (the batch's query deadline, mostly spent
// by now): one slow call must not cost the others their alert. A webhook that fails
// is logged, never retried here: the log line above it already carries the alert, and
// the DLQ row stays.
func (a *Alerter) DeadLettered(ctx context.Context, dead []outbox.DeadLetter) {
	var calls sync.WaitGroup
	for _, d := range dead {
		a.logger.Error("event moved to the dead-letter queue; replay it once fixed",
			slog.String("event_id", d.EventID.String()), slog.String("event_type", d.EventType),
			slog.String("aggregate_id", d.AggregateID), slog.Int("attempts", d.Attempts),
			slog.String("last_error", d.LastError))
		calls.Go(func() { a.Call(ctx, d) })
	}
	calls.Wait()
}

// Call posts the alert of d to the webhook, if one is set, under its own timeout,
// detached from ctx's deadline, and logs a failure. It does not log the dead letter
// itself (DeadLettered does both).
func (a *Alerter) Call(ctx context.Context, d outbox.DeadLetter) {
	if a.webhookURL == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	if err := a.post(ctx, a.alertFor(d)); err != nil {
		a.logger.Warn("alert webhook", slog.String("event_id", d.EventID.String()), slog.Any("err", err))
	}
}

func (a *Alerter) alertFor(d outbox.DeadLetter) alertEvent {
	return alertEvent{
		RoutingKey:  a.routingKey,
		EventAction: "trigger",
		DedupKey:    d.EventID.String(),
		Payload: alertPayload{
			Summary:       fmt.Sprintf("outbox event %s (%s) dead-lettered: %s", d.EventID, d.EventType, d.LastError),
			Source:        a.source,
			Severity:      "error",
			CustomDetails: d,
		},
	}
}

// post sends event to the webhook, signed when a secret is set. Its errors name the
// webhook's host, never its URL.
//
// The signature's webhook-id is the event id, like dedup_key: every call about one
// dead letter carries the same id, so a receiver that deduplicates on it opens one
// incident however often the alert is sent. The timestamp is the call's own, as the
// specification asks, so that a receiver can refuse a recorded call replayed later.
func (a *Alerter) post(ctx context.Context, event alertEvent) error {
	body, err := json.Marshal(event)
	if err != nil {
		return fmt.Errorf("encode alert: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.webhookURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build alert request to %s: the URL does not parse", a.webhookHost)
	}
	req.Header.Set("Content-Type", "application/json")
	if !a.secret.IsZero() {
		a.secret.SetHeaders(req.Header, event.DedupKey, time.Now(), body)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		// A *url.Error quotes the whole URL; keep only what went wrong.
		if urlErr, ok := errors.AsType[*url.Error](err); ok {
			err = urlErr.Err
		}
		return fmt.Errorf("post alert to %s: %w", a.webhookHost, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("post alert to %s: status %s", a.webhookHost, resp.Status)
	}
	return nil
}
