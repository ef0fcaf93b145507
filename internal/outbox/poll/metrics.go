package poll

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// Metrics are the polling relay's Prometheus metrics: those both relays report under
// the same names (outbox_pending_count, outbox_published_total, ...) and three about
// claims and leases, which only this relay has.
type Metrics struct {
	shared *delivery.Metrics
	// claims and commitToClaim say which path wakes the relay, and how long after the
	// commit (worker.go).
	claims        *prometheus.CounterVec
	commitToClaim *prometheus.HistogramVec
	leasesExpired prometheus.Counter
}

// NewMetrics creates the metrics of the polling relay's claims and leases, and registers them with reg beside
// the shared ones (delivery.NewMetrics, which says when it fails).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_claims_total",
			Help: "Claims that found events, by what woke the worker (nudge, idle_poll, poll, busy, full_batch).",
		}, []string{"woken_by"}),
		commitToClaim: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "outbox_commit_to_claim_seconds",
			Help:    "Time from an event's creation (its transaction) to its claim, by what woke the worker that claimed it.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms .. 65 s
		}, []string{"woken_by"}),
		leasesExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_leases_expired_total",
			Help: "Batches whose transaction the database ended because it outlived the lease; their events are published again.",
		}),
	}
	for _, source := range wakeSources {
		m.claims.WithLabelValues(string(source))
	}
	shared, err := delivery.NewMetrics(reg, m.claims, m.commitToClaim, m.leasesExpired)
	if err != nil {
		return nil, err
	}
	m.shared = shared
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
