package poll

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/tracing"
	"github.com/dscourse/payments-outbox/internal/webhooksig"
)

// Config configures a Relay. Zero fields take the documented defaults, so a
// config needs only Brokers and Topic.
type Config struct {
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Topic is where every event is published. Required.
	Topic string
	// ClientOpts are extra franz-go options appended after the relay's own, e.g. a
	// kgo.Dialer that routes traffic through Toxiproxy in tests.
	ClientOpts []kgo.Opt

	// Workers is the number of goroutines that claim and publish batches. Several
	// workers overlap one batch's Kafka round trip with another's database work.
	// Default 4.
	Workers int
	// BatchSize is the most rows one claim takes. Default 1000: a batch costs one
	// transaction of a few statements and one Kafka round trip whatever its size, so
	// bigger batches drain a backlog faster (compare with RELAY_BATCH_SIZE=500 go run
	// ./cmd/bench relay).
	BatchSize int
	// Lease is how long a claimed row belongs to its worker: the batch's transaction
	// runs with idle_in_transaction_session_timeout = Lease, so the database ends a
	// batch whose worker went quiet (paused, partitioned) after this long and its rows
	// go to others; a worker that dies releases them at once (its connection closes).
	// It must outlast a publish (PublishTimeout) plus the recording. A batch never
	// outlives it: its publish, resends of rejected records on their own included,
	// stops one QueryTimeout before the lease ends, and records whatever it has judged
	// by then (runOnce). Default 30s.
	Lease time.Duration
	// PublishTimeout bounds one publish attempt of a batch, including time spent
	// waiting on a broker that does not answer. Default 5s.
	PublishTimeout time.Duration
	// QueryTimeout bounds every database statement of the relay. Default 5s.
	QueryTimeout time.Duration
	// IdlePollInterval is how often an idle relay claims to find what no nudge of its
	// own process announced: other replicas' commits, retries whose backoff ended
	// (pollIdle). Default 10ms.
	IdlePollInterval time.Duration
	// PollInterval is each worker's own poll, the one a worker waits for after a batch
	// that failed on the database. Default 1s.
	PollInterval time.Duration

	// RetryBase and RetryMax shape the per-event backoff after a rejection: RetryBase
	// doubled per rejection, capped at RetryMax, with jitter. Defaults 1s and 5m.
	RetryBase time.Duration
	RetryMax  time.Duration
	// MaxRejections is how many record-level rejections move an event to the DLQ.
	// Broker outages never count. Default 5.
	MaxRejections int

	// OutageBackoffBase and OutageBackoffMax shape the backoff after a transport
	// failure (broker down, timeout, a partition unavailable): each failed event's own,
	// doubled per attempt, and the pause of the whole relay after a batch that got no
	// acknowledgement, doubled per consecutive such batch; both capped, with jitter
	// (failure.go). Defaults 100ms and 10s.
	OutageBackoffBase time.Duration
	OutageBackoffMax  time.Duration

	// StatsInterval is how often outbox_pending_count and the oldest pending age are
	// refreshed. Default 1s.
	StatsInterval time.Duration
	// OldestPendingAlert is the age of the oldest pending event above which the relay
	// logs an Error for operators (at most once per minute). Default 5m.
	OldestPendingAlert time.Duration

	// AlertWebhookURL, when set, receives a POST with a PagerDuty-Events-v2-like body
	// for every dead-lettered event. AlertRoutingKey is copied into its routing_key.
	AlertWebhookURL string
	AlertRoutingKey string
	// AlertSecret, when set, signs every webhook call as Standard Webhooks does,
	// so that the receiver can tell our alerts from forged ones (package
	// webhooksig). Default: the zero Secret, calls unsigned.
	AlertSecret webhooksig.Secret
	// AlertTimeout bounds one webhook call. The alerts of one batch are sent side by
	// side, so they hold its worker at most this long. Default 5s.
	AlertTimeout time.Duration

	// ShutdownTimeout bounds Run's return after its context ends: in-flight batches
	// get this long to finish, then are abandoned: each commits what Kafka
	// acknowledged, which hands its other rows back.
	// Default 10s.
	ShutdownTimeout time.Duration

	// TracerProvider traces each publish of an event whose writer traced it, as a
	// child of the writer's span (trace.go). Default: none, no span.
	TracerProvider trace.TracerProvider

	// FaultTimestampSkew is FAULT INJECTION, for the clock-skew chaos scenario only and
	// never for production (RELAY_FAULT_TIMESTAMP_SKEW; default 0, off): every record's
	// timestamp is moved this far from now, as a relay host whose clock runs ahead would
	// stamp it, so that a broker whose message.timestamp.after.max.ms is below it
	// refuses the records with INVALID_TIMESTAMP. It exists to show that the relay
	// treats that refusal as an outage (failure.go) and dead-letters nothing.
	FaultTimestampSkew time.Duration
	// FaultHoldBeforeMark is FAULT INJECTION, for the replica-pause chaos scenario only
	// and never for production (RELAY_FAULT_HOLD_BEFORE_MARK; default 0, off): one
	// batch in faultHoldEvery that Kafka acknowledged waits this long after its publish
	// before it is recorded, idle in its transaction, as a worker descheduled between
	// its send and its mark would. Set above Lease, it makes a late mark happen on
	// purpose: the database ends the batch's transaction at the lease, the mark fails,
	// and another worker publishes the rows again (faulthold.go).
	FaultHoldBeforeMark time.Duration
}

func (c Config) withDefaults() Config {
	c.TracerProvider = tracing.OrNone(c.TracerProvider)
	c.Workers = cmp.Or(c.Workers, 4)
	c.BatchSize = cmp.Or(c.BatchSize, 1000)
	c.Lease = cmp.Or(c.Lease, 30*time.Second)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 5*time.Second)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, 5*time.Second)
	c.IdlePollInterval = cmp.Or(c.IdlePollInterval, 10*time.Millisecond)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.RetryBase = cmp.Or(c.RetryBase, time.Second)
	c.RetryMax = cmp.Or(c.RetryMax, 5*time.Minute)
	c.MaxRejections = cmp.Or(c.MaxRejections, 5)
	c.OutageBackoffBase = cmp.Or(c.OutageBackoffBase, 100*time.Millisecond)
	c.OutageBackoffMax = cmp.Or(c.OutageBackoffMax, 10*time.Second)
	c.StatsInterval = cmp.Or(c.StatsInterval, time.Second)
	c.OldestPendingAlert = cmp.Or(c.OldestPendingAlert, 5*time.Minute)
	c.AlertTimeout = cmp.Or(c.AlertTimeout, 5*time.Second)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, 10*time.Second)
	return c
}

// Validate reports a config the relay cannot run with, saying which setting to fix.
// Zero fields are checked as their defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no Kafka brokers: set KAFKA_BROKERS"))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("no Kafka topic: set KAFKA_TOPIC"))
	}
	if c.Workers < 1 || c.BatchSize < 1 || c.MaxRejections < 1 {
		errs = append(errs, fmt.Errorf("workers (%d), batch size (%d) and max rejections (%d) must be positive",
			c.Workers, c.BatchSize, c.MaxRejections))
	}
	// A lease shorter than a publish would let a second worker claim rows the first
	// is still publishing: duplicates on every slow publish.
	if c.Lease <= c.PublishTimeout+c.QueryTimeout {
		errs = append(errs, fmt.Errorf("lease %s must exceed publish timeout %s plus query timeout %s: raise RELAY_LEASE",
			c.Lease, c.PublishTimeout, c.QueryTimeout))
	}
	if c.RetryMax < c.RetryBase {
		errs = append(errs, fmt.Errorf("RetryMax %s is below RetryBase %s: raise RetryMax", c.RetryMax, c.RetryBase))
	}
	if c.OutageBackoffMax < c.OutageBackoffBase {
		errs = append(errs, fmt.Errorf("outage backoff maximum %s is below its base %s: raise RELAY_OUTAGE_BACKOFF_MAX",
			c.OutageBackoffMax, c.OutageBackoffBase))
	}
	return errors.Join(errs...)
}
