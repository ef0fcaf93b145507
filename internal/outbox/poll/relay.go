package poll

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// Relay publishes committed outbox events to Kafka: each batch is one transaction that
// claims rows with FOR UPDATE SKIP LOCKED, publishes them while it waits, idle, moves
// the acknowledged ones to outbox_published, records the failures and commits
// (batch.go); the database ends a batch that stays idle longer than the lease
// (docs/adr/0002). Several workers run in one Relay, and several Relays (API replicas)
// can share one database.
type Relay struct {
	cfg     Config
	store   store
	logger  *slog.Logger
	metrics *Metrics
	alerter *delivery.Alerter
	outage  *outageBackoff
	breaker *delivery.PartitionBreaker
	// isolating holds the one record the relay is sending on its own, if any: a slot
	// that a worker takes before using worker.alone (isolate).
	isolating chan struct{}
	// wake carries nudges to idle workers, each saying where it came from. One slot
	// is enough: a nudge means "look again", and a worker that looks sees every row
	// committed so far.
	wake chan wakeSource
	// busy counts the workers in a streak of claims that find events, so that an idle
	// worker woken by a commit can leave it to them (worker.go).
	busy busyWorkers
	// acknowledged counts the batches Kafka acknowledged, for the FaultHoldBeforeMark
	// fault injection (faulthold.go).
	acknowledged atomic.Int64
}

// NewRelay returns a relay over the outbox in pool. It starts nothing; call Run.
func NewRelay(pool *pgxpool.Pool, cfg Config, logger *slog.Logger, metrics *Metrics) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("relay config: %w", err)
	}
	cfg = cfg.withDefaults()
	logger = logger.With(slog.String("component", "outbox_relay"))
	return &Relay{
		cfg:       cfg,
		store:     store{pool: pool},
		logger:    logger,
		metrics:   metrics,
		alerter:   delivery.NewAlerter(delivery.AlertConfig{WebhookURL: cfg.AlertWebhookURL, RoutingKey: cfg.AlertRoutingKey, Timeout: cfg.AlertTimeout, Secret: cfg.AlertSecret}, logger),
		outage:    &outageBackoff{base: cfg.OutageBackoffBase, max: cfg.OutageBackoffMax},
		breaker:   delivery.NewPartitionBreaker(cfg.OutageBackoffBase, cfg.OutageBackoffMax),
		isolating: make(chan struct{}, 1),
		wake:      make(chan wakeSource, 1),
	}, nil
}

// Run publishes until ctx ends, then stops within a known bound, in this order:
//
//  1. ctx ends: no worker claims a new batch.
//  2. The batches in flight get up to ShutdownTimeout to finish: they run under a
//     context of their own (workCtx below), which ctx's end does not cancel, so that
//     a batch is recorded whole instead of being cut off mid-publish.
//  3. If they have not finished by then, workCtx is cancelled: each abandoned batch
//     moves what Kafka acknowledged and commits, under one QueryTimeout, which hands
//     the other rows back, so that another relay takes them at once.
//  4. The Kafka client closes and Run returns.
//
// Every publish, query and alert runs under a timeout, so Run returns at the latest
// about ShutdownTimeout plus one QueryTimeout (plus one AlertTimeout if the last batch
// dead-lettered events) after ctx ends: its caller needs no timer of
// its own, and the bound follows the configured ShutdownTimeout. It returns an error
// only when it cannot start.
func (r *Relay) Run(ctx context.Context) error {
	alone, err := kgo.NewClient(r.clientOpts()...)
	if err != nil {
		return fmt.Errorf("new Kafka delivery.Producer for isolated resends: %w", err)
	}
	defer alone.Close()
	workers := make([]worker, r.cfg.Workers)
	for i := range workers {
		own, err := kgo.NewClient(r.clientOpts()...)
		if err != nil {
			return fmt.Errorf("new Kafka delivery.Producer for worker %d: %w", i, err)
		}
		defer own.Close()
		workers[i] = worker{own: own, alone: alone}
	}
	r.runWorkers(ctx, workers)
	return nil
}

// runWorkers is Run once its Kafka clients exist, one pair per worker: it runs the
// workers, the idle poll and the monitor until ctx ends, then stops them within Run's
// bound.
func (r *Relay) runWorkers(ctx context.Context, workers []worker) {
	// In-flight work runs under its own context, so that stopping the relay lets the
	// current batch finish instead of cutting it off mid-publish.
	workCtx, abandonWork := context.WithCancel(context.WithoutCancel(ctx))
	defer abandonWork()

	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() { r.work(ctx, workCtx, &workers[i]) })
	}
	wg.Go(func() { r.pollIdle(ctx) })
	monitor := delivery.PendingMonitor{Pool: r.store.pool, Metrics: r.metrics.shared, Logger: r.logger,
		Interval: r.cfg.StatsInterval, QueryTimeout: r.cfg.QueryTimeout, AlertAge: r.cfg.OldestPendingAlert}
	wg.Go(func() { monitor.Run(ctx) })
	r.logger.Info("relay started", slog.Int("workers", r.cfg.Workers), slog.Int("batch_size", r.cfg.BatchSize),
		slog.String("topic", r.cfg.Topic))

	<-ctx.Done()
	stopped := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
	}()
	timer := time.NewTimer(r.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		r.logger.Warn("relay shutdown timed out; abandoning in-flight batches",
			slog.Duration("timeout", r.cfg.ShutdownTimeout))
		abandonWork()
		<-stopped // bounded: publishes and queries all run under timeouts
	}
	r.logger.Info("relay stopped")
}

// clientOpts are the producer options of both relays (delivery.ClientOpts says why
// each one), then the config's own.
func (r *Relay) clientOpts() []kgo.Opt {
	return delivery.ClientOpts(r.cfg.Brokers, r.cfg.PublishTimeout, r.cfg.ClientOpts...)
}

// store is the relay's access to the outbox's tables: the batch's SQL is in batch.go,
// the failures' in failure.go.
type store struct {
	pool *pgxpool.Pool
}
