package antifraud

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the consumer's Prometheus metrics. Create them once per registry with
// NewMetrics and hand them to every Consumer of the process.
type Metrics struct {
	processed  prometheus.Counter
	duplicates prometheus.Counter
	poison     *prometheus.CounterVec
	// orderViolations has a series per reason from the start, so that an alert on it
	// has a zero to compare with.
	orderViolations *prometheus.CounterVec
	// parked is how many events wait for a predecessor in parked_events (park.go),
	// table-wide: it should come back to 0.
	parked     prometheus.Gauge
	decisions  *prometheus.CounterVec
	processing prometheus.Histogram
	lag        *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg. It fails if reg already
// holds metrics of the same names.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		processed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "antifraud_processed_total",
			Help: "Events processed for the first time; each applied PaymentCreated produced one decision.",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "antifraud_duplicates_total",
			Help: "Deliveries of an event already processed, absorbed without effect.",
		}),
		poison: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "antifraud_poison_total",
			Help: "Records that can never be processed, stored in consumer_dead_letters and skipped, by reason.",
		}, []string{"reason"}),
		orderViolations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "antifraud_order_violations_total",
			Help: "Events that did not follow their payment's last applied event, stored in order_violations and not applied, by reason. Must stay 0.",
		}, []string{"reason"}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "antifraud_parked_events",
			Help: "Events in parked_events: they arrived before an earlier event of their payment and wait for it, not applied and without a dedup row (all consumers).",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "antifraud_decisions_total",
			Help: "Decisions made, by verdict (approve, review, block).",
		}, []string{"decision"}),
		processing: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "antifraud_processing_seconds",
			Help:    "Time to process one poll's batch: decode, its database transactions, offset commit.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1 ms to 8 s
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "antifraud_lag",
			Help: "Records behind the partition's high watermark after the last processed batch, by partition.",
		}, []string{"partition"}),
	}
	for _, c := range []prometheus.Collector{m.processed, m.duplicates, m.poison, m.orderViolations, m.parked, m.decisions, m.processing, m.lag} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register antifraud metrics: %w", err)
		}
	}
	for _, reason := range orderReasons {
		m.orderViolations.WithLabelValues(reason)
	}
	return m, nil
}

func (m *Metrics) setLag(partition int32, lag int64) {
	m.lag.WithLabelValues(strconv.Itoa(int(partition))).Set(float64(lag))
}

// forgetLag removes the series of a partition this member no longer consumes, so that a
// dashboard summing the lag of every member does not count it twice.
func (m *Metrics) forgetLag(partition int32) {
	m.lag.DeleteLabelValues(strconv.Itoa(int(partition)))
}
