package cdc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// Metrics are the CDC relay's Prometheus metrics: those both relays report under the
// same names (outbox_pending_count, outbox_published_total, ...) and three about the
// slot and the stream, which only this mode has.
type Metrics struct {
	shared *delivery.Metrics
	// walRetained is what a slot costs while nobody reads it: PostgreSQL keeps every
	// WAL segment from the slot's restart position on, for every database of the
	// server, until the relay confirms past it. An outage of the relay (or of Kafka,
	// which stops it confirming) grows it without bound: the alert in
	// deploy/prometheus/alerts.yml fires before the disk fills.
	walRetained prometheus.Gauge
	// streaming is 1 while this relay holds the slot and 0 while it waits for it (a
	// second replica) or reconnects.
	streaming prometheus.Gauge
	// parked is how many events wait beside the stream for a partition that stopped
	// answering (parking.go); the slot stays behind the oldest of them.
	parked prometheus.Gauge
	// reconciled counts the rows found pending behind the confirmed position and
	// published again (reconcile.go): each is a mark that missed its row.
	reconciled prometheus.Counter
}

// NewMetrics creates the metrics of the slot and the stream, and registers them with reg beside
// the shared ones (delivery.NewMetrics, which says when it fails).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		walRetained: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_wal_retained_bytes",
			Help: "WAL the CDC relay's replication slot holds back (current WAL position minus the slot's restart_lsn); -1 when the slot does not exist.",
		}),
		streaming: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_streaming",
			Help: "1 while this CDC relay streams from its replication slot, 0 while it waits for it or reconnects.",
		}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_cdc_parked_events",
			Help: "Events the CDC relay parked beside the stream because their partition stopped answering; the slot is confirmed only up to the oldest.",
		}),
		reconciled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_cdc_reconciled_total",
			Help: "Rows the CDC relay found pending behind its slot's confirmed position (a mark that missed its row) and published again.",
		}),
	}
	shared, err := delivery.NewMetrics(reg, m.walRetained, m.streaming, m.parked, m.reconciled)
	if err != nil {
		return nil, err
	}
	m.shared = shared
	return m, nil
}
