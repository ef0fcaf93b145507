// Package antifraud is the antifraud consumer: it reads PaymentCreated events from Kafka,
// scores each payment with the rules of rules.go, and stores one decision per payment,
// however many times Kafka delivers the event.
//
// Delivery is at least once, so the consumer is idempotent: the event id (the X-Event-Id
// header) goes into processed_events, whose primary key rejects a second copy, in the same
// database transaction as the decision. Offsets are committed to Kafka only after that
// transaction committed. A crash between the two redelivers events that are already
// processed, and the primary key turns them into counted no-ops.
//
// The same transaction adds each first-time payment to its user's running totals
// (user_totals: payment count and amount per currency), which the total rule reads. Unlike
// a decision, a total is not idempotent by itself: a redelivery applied again would count
// twice. Dedup is what keeps the totals exact, and the chaos verifier checks them.
//
// Velocity looks at the same user's payments that occurred in the window before the one
// being decided, in event time, excluding the payment itself. A decision, once committed,
// is never recomputed, so redeliveries cannot change it. What remains is an order
// dependence: events of one user are spread over partitions (the key is the payment id),
// so a payment can be decided before an earlier payment of the same user has been
// processed, and then that earlier payment is not counted. A replay of the same log in the
// same order gives the same decisions.
package antifraud

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/tracing"
)

// Config configures a Consumer. The zero value of a field means its default.
type Config struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Topic is the topic of payment events. Default event.DefaultTopic, "payments.events".
	Topic string
	// Group is the consumer group. Default "antifraud".
	Group string
	// MaxPollRecords bounds the records of one poll, hence of its database transactions.
	// Rebalances wait for the batch in flight, so keep a batch well under a second of work.
	// Default DefaultMaxPollRecords.
	MaxPollRecords int
	// BatchTimeout bounds the database work and the offset commit of one batch. Default 30s.
	BatchTimeout time.Duration
	// RetryBackoffMax caps the wait between attempts at a batch whose transaction failed
	// (the database is down, say). The first wait is 100ms, doubled each time. Default 5s.
	RetryBackoffMax time.Duration
	// Parallelism is how many transactions a poll is split into, by user (slice.go), run
	// side by side on as many connections of the pool: PostgreSQL executing the batch is
	// the consumer's bound, and one transaction uses one of its cores. The pool needs at
	// least this many connections. Default 2.
	Parallelism int
	// Rules are the fraud rules' thresholds.
	Rules Rules
	// RebalanceProtocol is how the group hands partitions over (rebalance.go).
	// Default DefaultRebalanceProtocol, cooperative-sticky.
	RebalanceProtocol RebalanceProtocol
	// ClientOpts are appended to the options of the Kafka client, e.g. a shorter
	// kgo.FetchMaxWait in tests. They must not change the group or commit settings.
	ClientOpts []kgo.Opt

	// TracerProvider traces each decision, as a child of the publish whose traceparent
	// header the record carries (trace.go). Default: none, no span.
	TracerProvider trace.TracerProvider

	// AfterDBCommit is a FAULT-INJECTION hook for tests and the chaos consumer-crash
	// scenario; leave it nil in production. It is called after a batch's transaction
	// committed and before its offsets are committed. If it returns an error, Run stops at
	// once as if the process had died right there: it commits no offset (not even the ones
	// of earlier batches that are still pending), closes the client and returns the error.
	// cmd/consumer's hook kills the process instead.
	AfterDBCommit func() error
}

// DefaultMaxPollRecords is the default Config.MaxPollRecords: 16,000 records are about
// 0.3 s of work at the rate docs/bench.md measures ("The consumer"). Each poll costs the
// same statements, round trips, commits and offset commit whatever its size, so larger
// polls spread them over more events: 1,000 made a third of the relay's rate, 16,000
// half of it.
const DefaultMaxPollRecords = 16_000

func (c Config) withDefaults() Config {
	c.TracerProvider = tracing.OrNone(c.TracerProvider)
	c.Topic = cmp.Or(c.Topic, event.DefaultTopic)
	c.Group = cmp.Or(c.Group, "antifraud")
	c.MaxPollRecords = cmp.Or(c.MaxPollRecords, DefaultMaxPollRecords)
	c.Parallelism = cmp.Or(c.Parallelism, 2)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, 30*time.Second)
	c.RetryBackoffMax = cmp.Or(c.RetryBackoffMax, 5*time.Second)
	c.Rules = c.Rules.withDefaults()
	c.RebalanceProtocol = cmp.Or(c.RebalanceProtocol, DefaultRebalanceProtocol)
	return c
}

// Validate reports a configuration the consumer cannot run with.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no Kafka brokers: set at least one seed broker, e.g. 127.0.0.1:19092"))
	}
	if c.MaxPollRecords < 0 {
		errs = append(errs, fmt.Errorf("max poll records is %d: want a positive number, e.g. 1000", c.MaxPollRecords))
	}
	if c.Parallelism < 0 {
		errs = append(errs, fmt.Errorf("parallelism is %d: want a positive number of transactions per poll, e.g. 2", c.Parallelism))
	}
	if c.BatchTimeout < 0 || c.RetryBackoffMax < 0 {
		errs = append(errs, fmt.Errorf("batch timeout %s and retry backoff %s: want positive durations", c.BatchTimeout, c.RetryBackoffMax))
	}
	if err := c.Rules.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("rules: %w", err))
	}
	if _, err := ParseRebalanceProtocol(string(c.RebalanceProtocol)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// A Consumer consumes payment events into the antifraud database. Create it with
// NewConsumer and call Run once.
type Consumer struct {
	cfg     Config
	pool    *pgxpool.Pool
	logger  *slog.Logger
	metrics *Metrics

	// processed holds, per assigned partition, the offset after the last record whose
	// transaction committed: the only offsets this member may ever commit. The rebalance
	// callbacks read it from the client's goroutine, hence the mutex.
	mu        sync.Mutex
	processed map[int32]kgo.EpochOffset
}

// NewConsumer returns a consumer, or an error if cfg is not valid.
func NewConsumer(pool *pgxpool.Pool, cfg Config, logger *slog.Logger, metrics *Metrics) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("antifraud consumer config: %w", err)
	}
	return &Consumer{
		cfg:       cfg.withDefaults(),
		pool:      pool,
		logger:    logger.With(slog.String("component", "antifraud_consumer")),
		metrics:   metrics,
		processed: map[int32]kgo.EpochOffset{},
	}, nil
}

// errCrashInjected wraps the AfterDBCommit hook's error.
var errCrashInjected = errors.New("fault injected after database commit")

// Run joins the group and processes events until ctx is cancelled. Then it finishes the
// batch in flight, commits the offsets of everything processed, leaves the group and
// returns nil. It returns an error only if the client cannot be created or the
// AfterDBCommit hook asked for a crash.
func (c *Consumer) Run(ctx context.Context) error {
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(c.cfg.Brokers...),
		kgo.ConsumerGroup(c.cfg.Group),
		kgo.ConsumeTopics(c.cfg.Topic),
		// Offsets are committed by hand, after the database transaction.
		kgo.DisableAutoCommit(),
		// No rebalance while a batch is in flight: partitions cannot move to another
		// member between our database commit and our offset commit.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
		// A new group, or a committed offset no longer in the log: start from the
		// earliest record. Re-reading is cheap (deduplicated); skipping would lose events.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, c.cfg.RebalanceProtocol.groupOpts()...)
	opts = append(opts, c.cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("new Kafka client: %w", err)
	}

	c.refreshParked(ctx)
	c.logger.Info("consuming", slog.String("topic", c.cfg.Topic), slog.String("group", c.cfg.Group),
		slog.String("rebalance_protocol", string(c.cfg.RebalanceProtocol)))
	for {
		fetches := cl.PollRecords(ctx, c.cfg.MaxPollRecords)
		if fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				c.logger.Warn("fetch failed", slog.String("topic", topic),
					slog.Int("partition", int(partition)), slog.Any("err", err))
			}
		})
		if fetches.NumRecords() > 0 {
			if err := c.handle(ctx, cl, fetches); err != nil {
				c.crash(cl)
				return err
			}
		}
		cl.AllowRebalance()
		if ctx.Err() != nil {
			break
		}
	}
	c.shutdown(cl)
	return nil
}

// handle processes one poll: one transaction, then the offset commit. It keeps retrying a
// failed transaction until it succeeds or ctx ends, never skipping ahead: an offset past a
// record that is not in the database would lose it.
func (c *Consumer) handle(ctx context.Context, cl *kgo.Client, fetches kgo.Fetches) error {
	start := time.Now()
	records := fetches.Records()
	for failures := 0; ; failures++ {
		// The batch is finished even if ctx is cancelled meanwhile (shutdown): it is
		// bounded by BatchTimeout instead.
		batchCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.BatchTimeout)
		res, err := c.processBatch(batchCtx, records)
		cancel()
		if isDataError(err) {
			// Retrying would fail the same way: find the record the database refuses.
			res, err = c.isolate(ctx, records, err)
		}
		if err == nil {
			c.observe(res)
			break
		}
		pause := backoff.Delay(100*time.Millisecond, c.cfg.RetryBackoffMax, failures)
		c.logger.Warn("batch failed, will retry it", slog.Int("records", len(records)),
			slog.Duration("backoff", pause), slog.Any("err", err))
		if !backoff.Wait(ctx, pause) {
			// Shutting down: the batch stays unprocessed and uncommitted, and is
			// delivered again to whoever consumes the partitions next.
			return nil
		}
	}

	if c.cfg.AfterDBCommit != nil {
		if err := c.cfg.AfterDBCommit(); err != nil {
			return fmt.Errorf("%w: %w", errCrashInjected, err)
		}
	}
	c.markProcessed(records)
	commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.BatchTimeout)
	defer cancel()
	// CommitRecords commits each partition up to its last record.
	if err := cl.CommitRecords(commitCtx, records...); err != nil {
		// Not fatal: the offsets are committed again on revoke or shutdown, and if they
		// never are, the redelivered events are absorbed as duplicates.
		c.logger.Warn("commit offsets failed", slog.Any("err", err))
	}
	c.metrics.processing.Observe(time.Since(start).Seconds())
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if n := len(p.Records); n > 0 && p.HighWatermark >= 0 {
			c.metrics.setLag(p.Partition, max(0, p.HighWatermark-(p.Records[n-1].Offset+1)))
		}
	})
	return nil
}

// observe updates the metrics and logs what a committed batch did.
func (c *Consumer) observe(res batchResult) {
	c.metrics.processed.Add(float64(res.processed))
	c.metrics.duplicates.Add(float64(res.duplicates))
	for verdict, n := range res.verdicts {
		c.metrics.decisions.WithLabelValues(string(verdict)).Add(float64(n))
	}
	for _, v := range res.violations {
		c.metrics.orderViolations.WithLabelValues(v.reason).Inc()
		c.logger.Error("event out of its payment's order, recorded in order_violations and not applied",
			slog.String("reason", v.reason), slog.String("event_id", v.ev.id.String()),
			slog.String("payment_id", v.ev.payload.PaymentID.String()), slog.String("event_type", v.ev.typ),
			slog.Int("sequence", v.ev.sequence), slog.Int("last_sequence", v.before.sequence), slog.String("last_type", v.before.lastType),
			slog.Int("partition", int(v.ev.record.Partition)), slog.Int64("offset", v.ev.record.Offset))
	}
	if res.parkedNow != nil {
		c.metrics.parked.Set(float64(*res.parkedNow))
	}
	if res.parked.parked > 0 {
		c.logger.Warn("events parked until an earlier event of their payment arrives",
			slog.Int("parked", res.parked.parked), slog.Int("waiting", res.parked.waiting))
	}
	for _, l := range res.poison {
		c.metrics.poison.WithLabelValues(l.reason).Inc()
		c.logger.Warn("poison record stored as a dead letter and skipped",
			slog.String("reason", l.reason), slog.String("detail", l.detail),
			slog.String("topic", l.topic), slog.Int("partition", int(l.partition)), slog.Int64("offset", l.offset))
	}
}
