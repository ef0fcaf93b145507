package delivery

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics both relays report under the same names:
// dashboards, alert rules and the chaos harness read one set in either mode. The
// course's SLO is on outbox_pending_count, and the chaos harness shows
// outbox_publish_failures_total in its report as the service's own view of the faults
// (its validity rows never depend on it): keep both names.
type Metrics struct {
	pending          prometheus.Gauge
	oldestPendingAge prometheus.Gauge
	published        prometheus.Counter
	publishFailures  *prometheus.CounterVec
	deadLettered     prometheus.Counter
	batchDuration    prometheus.Histogram
	commitToPublish  prometheus.Histogram
	heldBack         prometheus.Counter
	// partitionsUnavailable is how many partitions the breaker holds open.
	partitionsUnavailable prometheus.Gauge
	// slotWAL is the WAL each replication slot of the outbox's database holds back
	// (slots.go), in both modes: a slot nobody reads any more holds WAL for ever.
	slotWAL *prometheus.GaugeVec
}

// Failure reasons, the values of the reason label of outbox_publish_failures_total.
const (
	// reasonTransport: the broker was unreachable or did not answer in time. The
	// event stays pending however long it lasts.
	reasonTransport = "transport"
	// reasonRejected: the broker refused this record. Counts towards the DLQ.
	reasonRejected = "rejected"
)

// NewMetrics creates the relays' shared metrics and registers them with reg, together
// with the relay's own metrics (own). It fails if reg already holds metrics of the same
// names: create them once per registry, by the one relay of the process.
func NewMetrics(reg prometheus.Registerer, own ...prometheus.Collector) (*Metrics, error) {
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
		heldBack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_held_back_total",
			Help: "Events not sent, and left pending, because their partition had stopped answering while others did.",
		}),
		partitionsUnavailable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_partitions_unavailable",
			Help: "Partitions that stopped answering while others did, whose events the relay holds back.",
		}),
		slotWAL: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_replication_slot_wal_retained_bytes",
			Help: "WAL each replication slot of the outbox's database holds back (current WAL position minus its restart_lsn), reported in both relay modes.",
		}, []string{"slot"}),
	}
	// Pre-create both reasons so a dashboard shows 0, not "no data", before a fault.
	m.publishFailures.WithLabelValues(reasonTransport)
	m.publishFailures.WithLabelValues(reasonRejected)
	shared := []prometheus.Collector{m.pending, m.oldestPendingAge, m.published, m.publishFailures,
		m.deadLettered, m.batchDuration, m.commitToPublish, m.heldBack, m.partitionsUnavailable, m.slotWAL}
	for _, c := range append(shared, own...) {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register outbox metrics: %w", err)
		}
	}
	return m, nil
}

// observePending sets outbox_pending_count and outbox_oldest_pending_age_seconds.
func (m *Metrics) observePending(count int64, oldestAge time.Duration) {
	m.pending.Set(float64(count))
	m.oldestPendingAge.Set(oldestAge.Seconds())
}

// CountPublished adds n events to outbox_published_total.
func (m *Metrics) CountPublished(n int64) { m.published.Add(float64(n)) }

// CountFailures adds n failed publish attempts to outbox_publish_failures_total, under
// reason "rejected" when the broker refused the records and "transport" otherwise.
func (m *Metrics) CountFailures(rejected bool, n int) {
	reason := reasonTransport
	if rejected {
		reason = reasonRejected
	}
	m.publishFailures.WithLabelValues(reason).Add(float64(n))
}

// CountDeadLettered adds n events to outbox_dlq_total.
func (m *Metrics) CountDeadLettered(n int) { m.deadLettered.Add(float64(n)) }

// ObserveBatch records one published batch in outbox_batch_duration_seconds.
func (m *Metrics) ObserveBatch(d time.Duration) { m.batchDuration.Observe(d.Seconds()) }

// ObserveCommitToPublish records one event's time from its creation to Kafka's
// acknowledgement in outbox_commit_to_publish_seconds.
func (m *Metrics) ObserveCommitToPublish(d time.Duration) { m.commitToPublish.Observe(d.Seconds()) }

// CountHeldBack adds n events to outbox_held_back_total: not sent, because their
// partition had stopped answering while others did.
func (m *Metrics) CountHeldBack(n int) { m.heldBack.Add(float64(n)) }

// SetPartitionsUnavailable sets outbox_partitions_unavailable.
func (m *Metrics) SetPartitionsUnavailable(n int) { m.partitionsUnavailable.Set(float64(n)) }
