package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// What the change-data-capture relay (package outbox/cdc) shares with the polling relay.
// It has a loop of its own, but the same contract, so it reports under the same metric
// names (dashboards, alert rules and the chaos harness read one set in both modes) and
// judges broker errors by the same rule.

// IsRejection reports whether err means the broker refused this record for a reason of
// its own, so that sending the same bytes again cannot succeed: the only errors that
// count towards the DLQ (failure.go says which codes, and why not the others).
func IsRejection(err error) bool { return isRejection(err) }

// PendingStats counts the pending events and returns the age of the oldest one, on the
// database's clock alone (store.pendingStats): the CDC relay moves published events out
// of outbox_events too, so its monitor reads the same figures the same way.
func PendingStats(ctx context.Context, pool *pgxpool.Pool) (count int64, oldestAge time.Duration, err error) {
	return store{pool: pool}.pendingStats(ctx)
}

// MarkPublished moves the events ids, which the broker acknowledged, from outbox_events
// to outbox_published, as the polling relay's batches do (store.markPublished): GET
// /payments/{id}, the cleaner and operators' queries read one layout in both modes. A
// row that is not pending (failed, or moved already by an earlier publish) stays as it
// is. It returns how many events it moved.
// q is a pool, a connection or a transaction.
func MarkPublished(ctx context.Context, q Execer, ids []uuid.UUID) (int64, error) {
	return markPublished(ctx, q, ids)
}

// ObservePending sets outbox_pending_count and outbox_oldest_pending_age_seconds.
func (m *Metrics) ObservePending(count int64, oldestAge time.Duration) {
	m.pending.Set(float64(count))
	m.oldestPendingAge.Set(oldestAge.Seconds())
}

// CountPublished adds n events to outbox_published_total.
func (m *Metrics) CountPublished(n int) { m.published.Add(float64(n)) }

// CountFailure adds one failed publish attempt to outbox_publish_failures_total, under
// reason "rejected" when the broker refused the record and "transport" otherwise.
func (m *Metrics) CountFailure(rejected bool) {
	reason := reasonTransport
	if rejected {
		reason = reasonRejected
	}
	m.publishFailures.WithLabelValues(reason).Inc()
}

// CountDeadLettered adds one event to outbox_dlq_total.
func (m *Metrics) CountDeadLettered() { m.deadLettered.Inc() }

// ObserveBatch records one published batch in outbox_batch_duration_seconds.
func (m *Metrics) ObserveBatch(d time.Duration) { m.batchDuration.Observe(d.Seconds()) }

// ObserveCommitToPublish records one event's time from its creation to Kafka's
// acknowledgement in outbox_commit_to_publish_seconds.
func (m *Metrics) ObserveCommitToPublish(d time.Duration) { m.commitToPublish.Observe(d.Seconds()) }

// CallAlertWebhook posts the alert of the dead letter d to webhookURL, as the polling
// relay does for its own (alert.go): the same body, so that one receiver and one
// runbook serve both modes, the same redirect rule, and errors that name the webhook's
// host only. It runs under its own timeout, detached from ctx's deadline, logs a
// failure on logger, and does nothing when webhookURL is "". The caller logs the dead
// letter itself.
func CallAlertWebhook(ctx context.Context, logger *slog.Logger, webhookURL, routingKey string, timeout time.Duration, d DeadLetter) {
	cfg := RelayConfig{AlertWebhookURL: webhookURL, AlertRoutingKey: routingKey, AlertTimeout: timeout}
	newAlerter(cfg.withDefaults(), logger).call(ctx, d)
}
