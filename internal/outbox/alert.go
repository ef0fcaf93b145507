package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
)

// alerter tells operators about dead-lettered events: always a structured Error log
// line, and, when configured, a webhook call with a PagerDuty-Events-v2-like body.
type alerter struct {
	webhookURL string
	routingKey string
	source     string
	client     *http.Client
	logger     *slog.Logger
}

func newAlerter(cfg RelayConfig, logger *slog.Logger) *alerter {
	source, err := os.Hostname()
	if err != nil {
		source = "outbox-relay"
	}
	return &alerter{
		webhookURL: cfg.AlertWebhookURL,
		routingKey: cfg.AlertRoutingKey,
		source:     source,
		client:     &http.Client{Timeout: cfg.AlertTimeout},
		logger:     logger,
	}
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
	Summary       string     `json:"summary"`
	Source        string     `json:"source"`
	Severity      string     `json:"severity"`
	CustomDetails DeadLetter `json:"custom_details"`
}

// deadLettered raises the alert for d. A webhook that fails is logged, never retried
// here: the log line above it already carries the alert, and the DLQ row stays.
func (a *alerter) deadLettered(ctx context.Context, d DeadLetter) {
	a.logger.Error("event moved to the dead-letter queue; replay it once fixed",
		slog.String("event_id", d.EventID.String()), slog.String("event_type", d.EventType),
		slog.String("aggregate_id", d.AggregateID), slog.Int("attempts", d.Attempts),
		slog.String("last_error", d.LastError))
	if a.webhookURL == "" {
		return
	}
	if err := a.post(ctx, alertEvent{
		RoutingKey:  a.routingKey,
		EventAction: "trigger",
		DedupKey:    d.EventID.String(),
		Payload: alertPayload{
			Summary:       fmt.Sprintf("outbox event %s (%s) dead-lettered: %s", d.EventID, d.EventType, d.LastError),
			Source:        a.source,
			Severity:      "error",
			CustomDetails: d,
		},
	}); err != nil {
		a.logger.Warn("alert webhook", slog.String("event_id", d.EventID.String()), slog.Any("err", err))
	}
}

func (a *alerter) post(ctx context.Context, event alertEvent) error {
	body, err := json.Marshal(event)
	if err != nil {
		return fmt.Errorf("encode alert: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.webhookURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build alert request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("post alert: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("post alert: status %s", resp.Status)
	}
	return nil
}
