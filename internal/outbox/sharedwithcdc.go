package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
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

// The partition breaker (breaker.go), for the CDC relay: one partition that stops
// answering must not hold the other partitions' events in either mode, and both modes
// should judge "stopped answering" by one rule. The CDC relay does not hold a broken
// partition's events back in the table, as the polling relay does; it parks them beside
// the stream (package cdc, parking.go), but it asks the same breaker when to send them.

// PartitionBreaker records the partitions that stopped answering while the broker
// answered for others, and when to probe them again. It is safe for concurrent use.
type PartitionBreaker struct{ b *partitionBreaker }

// NewPartitionBreaker returns a breaker whose open partitions wait base, doubled per
// failed probe up to max, before the next probe.
func NewPartitionBreaker(base, max time.Duration) *PartitionBreaker {
	return &PartitionBreaker{b: newPartitionBreaker(base, max)}
}

// IsOpen reports whether partition p stopped answering: its records are not to be sent
// but as a probe (Admit).
func (pb *PartitionBreaker) IsOpen(p int32) bool {
	pb.b.mu.Lock()
	defer pb.b.mu.Unlock()
	return pb.b.open[p] != nil
}

// AnyOpen reports whether some partition is open.
func (pb *PartitionBreaker) AnyOpen() bool { return pb.b.anyOpen() }

// OpenCount is how many partitions are open, for outbox_partitions_unavailable.
func (pb *PartitionBreaker) OpenCount() int { return pb.b.openCount() }

// An Admission is what the breaker decided for one produce call (Admit).
type Admission struct{ a admission }

// Holds reports whether rec is to be held back, unsent.
func (a Admission) Holds(rec *kgo.Record) bool {
	_, held := a.a.holdFor[rec]
	return held
}

// Admit decides which of records may be sent, given the partition of each (nil: all
// may), for a send that may take probeTime: a record of a closed partition may, and
// one of an open partition only as the probe of that partition, once its backoff is
// over and no other probe is out. Every Admit must be followed by a Judge of what was
// sent, which ends its probe.
func (pb *PartitionBreaker) Admit(records []*kgo.Record, partitionOf map[*kgo.Record]int32, probeTime time.Duration) Admission {
	return Admission{pb.b.admit(records, partitionOf, probeTime)}
}

// Acked notes that the broker acknowledged a record of this relay just now.
func (pb *PartitionBreaker) Acked() { pb.b.acked() }

// AnsweredSince reports whether the broker acknowledged a record of this relay after
// t: a call sent at t whose records got no answer then met a partition that does not
// answer, not a broker down for all.
func (pb *PartitionBreaker) AnsweredSince(t time.Time) bool { return pb.b.answeredSince(t) }

// Judge records the broker's results on the records an Admission let through,
// partition by partition (partitionOf as given to Admit, or computed after the call): a
// partition with an acknowledgement closes, one with only transport failures stays
// open, or opens when answered (AnsweredSince the call was sent). A call sent without
// asking Admit (to partitions known to be closed) is judged with the zero Admission.
func (pb *PartitionBreaker) Judge(a Admission, results kgo.ProduceResults, partitionOf map[*kgo.Record]int32, answered bool) {
	acked, failed := partitionVerdicts(results, partitionOf)
	pb.b.judged(a.a, acked, failed, answered)
}

// PartitionByKey is the client option that pins a Kafka client to Kafka's murmur2 rule
// for keyed records, so that the relay knows where a record goes before it sends it
// (PartitionsOf).
func PartitionByKey() kgo.Opt { return kgo.RecordPartitioner(keyPartitioner) }

// MetadataCache is what PartitionsOf needs of a Kafka client; *kgo.Client has it.
type MetadataCache = metadataCache

// PartitionsOf is the partition of each record of topic by the rule of PartitionByKey,
// with the partition count from p's metadata cache, or nil when that count is not known.
func PartitionsOf(ctx context.Context, p MetadataCache, topic string, records []*kgo.Record) map[*kgo.Record]int32 {
	return partitionsOf(ctx, p, topic, records)
}

// CountHeldBack adds n events to outbox_held_back_total: not sent, because their
// partition had stopped answering while others did.
func (m *Metrics) CountHeldBack(n int) { m.heldBack.Add(float64(n)) }

// SetPartitionsUnavailable sets outbox_partitions_unavailable.
func (m *Metrics) SetPartitionsUnavailable(n int) { m.partitionsUnavailable.Set(float64(n)) }
