package outbox

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the relay's Prometheus metrics. The course's SLO is on
// outbox_pending_count, and the chaos harness shows outbox_publish_failures_total in its
// report as the service's own view of the faults (its validity rows never depend on it):
// keep both names.
type Metrics struct {
	pending          prometheus.Gauge
	oldestPendingAge prometheus.Gauge
	published        prometheus.Counter
	publishFailures  *prometheus.CounterVec
	deadLettered     prometheus.Counter
	batchDuration    prometheus.Histogram
	commitToPublish  prometheus.Histogram
	claims           *prometheus.CounterVec
	commitToClaim    *prometheus.HistogramVec
	deleted          prometheus.Counter
	leasesExpired    prometheus.Counter
	heldBack         prometheus.Counter
	// partitionsUnavailable is how many partitions the breaker holds open.
	partitionsUnavailable prometheus.Gauge
}

// Failure reasons, the values of the reason label of outbox_publish_failures_total.
const (
	// reasonTransport: the broker was unreachable or did not answer in time. The
	// event stays pending however long it lasts.
	reasonTransport = "transport"
	// reasonRejected: the broker refused this record. Counts towards the DLQ.
	reasonRejected = "rejected"
)

// NewMetrics creates the relay's metrics and registers them with reg. It fails if reg
// already holds metrics of the same names. Create them once per registry and hand them
// to the Relay and the Cleaner of the process.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_pending_count",
			Help: "Outbox events committed but not yet published (refreshed every few seconds).",
		}),
		oldestPendingAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_oldest_pending_age_seconds",
			Help: "Age of the oldest pending outbox event; 0 when none. Alert on this during broker outages.",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_published_total",
			Help: "Outbox events acknowledged by Kafka and moved to outbox_published.",
		}),
		publishFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_publish_failures_total",
			Help: "Failed publish attempts of outbox events, by reason (transport or rejected).",
		}, []string{"reason"}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_dlq_total",
			Help: "Outbox events moved to the dead-letter queue after repeated rejections.",
		}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_batch_duration_seconds",
			Help:    "Time to publish one claimed batch and record its outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15), // 1 ms .. 16 s
		}),
		commitToPublish: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "outbox_commit_to_publish_seconds",
			Help:    "Time from an event's creation (its transaction) to Kafka's acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18), // 1 ms .. 131 s
		}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_claims_total",
			Help: "Claims that found events, by what woke the worker (nudge, notify, poll, busy, full_batch).",
		}, []string{"woken_by"}),
		commitToClaim: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_commit_to_claim_seconds",
			Help:    "Time from an event's creation (its transaction) to its claim, by what woke the worker that claimed it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms .. 65 s
		}, []string{"woken_by"}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cleaned_total",
			Help: "Published outbox events deleted after the retention period.",
		}),
		leasesExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_leases_expired_total",
			Help: "Batches whose transaction the database ended because it outlived the lease; their events are published again.",
		}),
		heldBack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_held_back_total",
			Help: "Events not sent, and left pending, because their partition had stopped answering while others did.",
		}),
		partitionsUnavailable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_partitions_unavailable",
			Help: "Partitions that stopped answering while others did, whose events the relay holds back.",
		}),
	}
	// Pre-create both reasons so a dashboard shows 0, not "no data", before a fault.
	m.publishFailures.WithLabelValues(reasonTransport)
	m.publishFailures.WithLabelValues(reasonRejected)
	for _, source := range wakeSources {
		m.claims.WithLabelValues(string(source))
	}
	for _, c := range []prometheus.Collector{m.pending, m.oldestPendingAge, m.published, m.publishFailures,
		m.deadLettered, m.batchDuration, m.commitToPublish, m.claims, m.commitToClaim, m.deleted, m.leasesExpired,
		m.heldBack, m.partitionsUnavailable} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register outbox metrics: %w", err)
		}
	}
	return m, nil
}

// observeClaim counts a claim that found events and how long each had waited for it.
func (m *Metrics) observeClaim(woken wakeSource, events []claimedEvent) {
	m.claims.WithLabelValues(string(woken)).Inc()
	waited := m.commitToClaim.WithLabelValues(string(woken))
	now := time.Now()
	for _, e := range events {
		waited.Observe(now.Sub(e.CreatedAt).Seconds())
	}
}
