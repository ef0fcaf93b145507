package cdc

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/tracing"
	"github.com/dscourse/payments-outbox/internal/webhooksig"
)

// Config configures a Relay. Zero fields take the documented defaults, so a config
// needs only DatabaseURL, Brokers and Topic.
type Config struct {
	// DatabaseURL is the payments database. The relay opens its replication connection
	// from it (replication=database); the role needs the REPLICATION attribute.
	// Required.
	DatabaseURL string
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Topic is where every event is published. Required.
	Topic string
	// ClientOpts are extra franz-go options appended after the relay's own, e.g. a
	// kgo.Dialer that routes traffic through Toxiproxy in tests.
	ClientOpts []kgo.Opt

	// Slot is the name of the logical replication slot (RELAY_CDC_SLOT). Slots are
	// server-wide, so the default, "outbox_cdc_" plus the database name, keeps the
	// relays of two databases on one server apart; every replica of one API shares it,
	// and only one of them streams at a time (see Run).
	Slot string
	// Publication is the publication the slot reads: migration 00007 creates it.
	// Default "outbox_events_inserts".
	Publication string

	// BatchSize is the most events one produce call carries. Default 1000, as the
	// polling relay's claim.
	BatchSize int
	// MaxBatchDelay is how long the first event of a batch waits for others before the
	// batch goes to the publisher (once the publisher is free: a batch grows up to
	// BatchSize while it is busy, pipeline.go). Default 5ms.
	MaxBatchDelay time.Duration
	// PublishTimeout bounds one publish attempt, including time spent waiting on a
	// broker that does not answer. Default 5s.
	PublishTimeout time.Duration
	// QueryTimeout bounds every statement on the pool (marks, failures, stats).
	// Default 5s.
	QueryTimeout time.Duration
	// StatusInterval is how often the relay reports its confirmed position to the
	// server even when nothing is published, which the server also takes as a sign of
	// life (wal_sender_timeout, 60s by default, must exceed it). On a quiet stream it is
	// also the longest a finished batch waits to be confirmed (a busy one confirms at
	// its next message), and how often the relay looks for replays made through
	// another replica. Default 10s.
	StatusInterval time.Duration

	// RetryBase and RetryMax shape the wait before a rejected record is sent again:
	// RetryBase doubled per rejection, capped at RetryMax. The stream waits with it (it
	// is ordered), so these are much shorter than the polling relay's per-row backoff.
	// Defaults 100ms and 2s.
	RetryBase time.Duration
	RetryMax  time.Duration
	// MaxRejections is how many rejections move an event to the DLQ; the stream then
	// moves on. With the defaults a poison record holds the stream about 1.5s. Broker
	// outages never count. Default 5.
	MaxRejections int

	// MaxParked bounds the events parked beside the stream while their partition does
	// not answer (parking.go), so that the other partitions' events flow meanwhile. When
	// it is full the stream waits for the partition, as without parking. Each parked
	// event is held in memory with its payload. Default 10,000.
	MaxParked int

	// OutageBackoffBase and OutageBackoffMax shape the pause after a transport failure
	// (broker down, timeout) before the same records are sent again: doubled per
	// consecutive failure, capped. The partition breaker waits the same before it probes
	// a partition that stopped answering again, and the prober of parked events looks
	// for work every OutageBackoffBase (probe.go). Defaults 100ms and 10s.
	OutageBackoffBase time.Duration
	OutageBackoffMax  time.Duration
	// ReconnectInterval is the wait before the relay opens its replication connection
	// again after it was lost, or while another relay holds the slot. Default 1s.
	ReconnectInterval time.Duration

	// AlertWebhookURL, when set, receives a POST for every dead-lettered event, with the
	// polling relay's body (poll.Config.AlertWebhookURL); AlertRoutingKey is
	// copied into it; AlertSecret, when set, signs it (poll.Config.AlertSecret).
	// AlertTimeout bounds one call. Default timeout 5s.
	AlertWebhookURL string
	AlertRoutingKey string
	AlertSecret     webhooksig.Secret
	AlertTimeout    time.Duration

	// ReconcileInterval is how often the relay looks for rows left pending behind the
	// slot's confirmed position (reconcile.go). Default 1m.
	ReconcileInterval time.Duration

	// StatsInterval is how often outbox_pending_count, the oldest pending age and the
	// WAL the slot retains are refreshed. Default 1s.
	StatsInterval time.Duration
	// OldestPendingAlert is the age of the oldest pending event above which the relay
	// logs an Error for operators (at most once per minute), as the polling relay does.
	// Default 5m.
	OldestPendingAlert time.Duration
	// FaultTimestampSkew is FAULT INJECTION for the clock-skew chaos scenario, never for
	// production: the polling relay's RELAY_FAULT_TIMESTAMP_SKEW (poll.Config says
	// why it exists). Every record's timestamp is moved this far from now. Default 0, off.
	FaultTimestampSkew time.Duration

	// TracerProvider traces each publish of an event whose writer traced it, as a
	// child of the writer's span (the traceparent stored with the row), as the polling
	// relay does (docs/tracing.md). Default: none, no span.
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	c.Slot = cmp.Or(c.Slot, DefaultSlot(c.DatabaseURL))
	c.Publication = cmp.Or(c.Publication, "outbox_events_inserts")
	c.BatchSize = cmp.Or(c.BatchSize, 1000)
	c.MaxBatchDelay = cmp.Or(c.MaxBatchDelay, 5*time.Millisecond)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 5*time.Second)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, 5*time.Second)
	c.StatusInterval = cmp.Or(c.StatusInterval, 10*time.Second)
	c.RetryBase = cmp.Or(c.RetryBase, 100*time.Millisecond)
	c.RetryMax = cmp.Or(c.RetryMax, 2*time.Second)
	c.MaxRejections = cmp.Or(c.MaxRejections, 5)
	c.MaxParked = cmp.Or(c.MaxParked, 10_000)
	c.OutageBackoffBase = cmp.Or(c.OutageBackoffBase, 100*time.Millisecond)
	c.OutageBackoffMax = cmp.Or(c.OutageBackoffMax, 10*time.Second)
	c.ReconnectInterval = cmp.Or(c.ReconnectInterval, time.Second)
	c.StatsInterval = cmp.Or(c.StatsInterval, time.Second)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, time.Minute)
	c.OldestPendingAlert = cmp.Or(c.OldestPendingAlert, 5*time.Minute)
	c.AlertTimeout = cmp.Or(c.AlertTimeout, 5*time.Second)
	c.TracerProvider = tracing.OrNone(c.TracerProvider)
	return c
}

// slotName is what PostgreSQL accepts as a slot name.
var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// DefaultSlot is the slot name used when Config.Slot is empty: "outbox_cdc_" and the
// database name of databaseURL, lower case, with anything a slot name cannot hold
// replaced by "_", cut to PostgreSQL's 63 characters.
func DefaultSlot(databaseURL string) string {
	cfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return "outbox_cdc"
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, strings.ToLower("outbox_cdc_"+cfg.Database))
	return name[:min(len(name), 63)]
}

// Validate reports a config the relay cannot run with, saying which setting to fix.
// Zero fields are checked as their defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if _, err := pgconn.ParseConfig(c.DatabaseURL); c.DatabaseURL == "" || err != nil {
		errs = append(errs, errors.New("no usable database URL: set DATABASE_URL"))
	}
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no Kafka brokers: set KAFKA_BROKERS"))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("no Kafka topic: set KAFKA_TOPIC"))
	}
	if !slotName.MatchString(c.Slot) {
		errs = append(errs, fmt.Errorf("slot name %q: use 1 to 63 lower-case letters, digits and _ in RELAY_CDC_SLOT", c.Slot))
	}
	if c.BatchSize < 1 || c.MaxRejections < 1 || c.MaxParked < 1 {
		errs = append(errs, fmt.Errorf("batch size (%d), max rejections (%d) and max parked events (%d) must be positive", c.BatchSize, c.MaxRejections, c.MaxParked))
	}
	if c.RetryMax < c.RetryBase || c.OutageBackoffMax < c.OutageBackoffBase {
		errs = append(errs, errors.New("a backoff maximum is below its base: raise RELAY_OUTAGE_BACKOFF_MAX"))
	}
	return errors.Join(errs...)
}
