package cdc

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

	"github.com/dscourse/payments-outbox/internal/outbox"
)

// The dead-letter alert of the CDC relay: the polling relay's (package outbox), the
// same webhook body (PagerDuty-Events-v2-like, dedup_key
// the event id), so that one receiver and one runbook serve both modes. It is a copy
// because that alerter is unexported; exporting it from package outbox would let
// both relays share one.

// alertEvent is the webhook body.
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

// alertDeadLetter posts the alert of a dead letter to the webhook, when one is set,
// under its own AlertTimeout, detached from ctx (the stream's query deadline may be
// spent by now). The caller has logged the dead letter already. A failed call is
// logged and not retried: the log line carries the alert too, and the DLQ row stays.
// The stream waits for the call, which AlertTimeout bounds: a dead letter is rare, and
// its alert must not be lost to a relay that stops a moment later.
func (r *Relay) alertDeadLetter(ctx context.Context, d *outbox.DeadLetter) {
	if r.cfg.AlertWebhookURL == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.AlertTimeout)
	defer cancel()
	if err := r.postAlert(ctx, d); err != nil {
		r.logger.Warn("alert webhook", slog.String("event_id", d.EventID.String()), slog.Any("err", err))
	}
}

// postAlert sends the alert of d. Its errors name the webhook's host, never its URL,
// which carries the webhook's secret.
func (r *Relay) postAlert(ctx context.Context, d *outbox.DeadLetter) error {
	host := "the alert webhook"
	if u, err := url.Parse(r.cfg.AlertWebhookURL); err == nil {
		host = u.Host
	}
	source, err := os.Hostname()
	if err != nil {
		source = "outbox-cdc-relay"
	}
	body, err := json.Marshal(alertEvent{
		RoutingKey:  r.cfg.AlertRoutingKey,
		EventAction: "trigger",
		DedupKey:    d.EventID.String(),
		Payload: alertPayload{
			Summary:       fmt.Sprintf("outbox event %s (%s) dead-lettered: %s", d.EventID, d.EventType, d.LastError),
			Source:        source,
			Severity:      "error",
			CustomDetails: *d,
		},
	})
	if err != nil {
		return fmt.Errorf("encode alert: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.AlertWebhookURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build alert request to %s: the URL does not parse", host)
	}
	req.Header.Set("Content-Type", "application/json")
	// No redirects: a 307 would resend the body (event details, routing key) to
	// wherever the webhook points, and a webhook that redirects is misconfigured.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		if urlErr, ok := errors.AsType[*url.Error](err); ok {
			err = urlErr.Err // a *url.Error quotes the whole URL
		}
		return fmt.Errorf("post alert to %s: %w", host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("post alert to %s: status %s", host, resp.Status)
	}
	return nil
}
