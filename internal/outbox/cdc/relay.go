// Package cdc is the change-data-capture relay: it publishes the outbox's inserts to
// Kafka as PostgreSQL's logical replication stream delivers them, instead of polling
// the table (docs/adr/0003 compares the two; RELAY_MODE=cdc selects it).
//
// Its contract is the polling relay's (package poll): key = aggregate_id, the same
// headers and payload (event.Envelope), at least once. The replication slot is its
// cursor. The relay confirms a position to the server only once every event before it
// was acknowledged by Kafka and marked published, so a crash at any point makes the
// next relay stream those events again: it republishes, it never skips.
package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// Relay streams the outbox's inserts from a replication slot to Kafka. One goroutine
// does the work, because the stream is one ordered sequence and its confirmed position
// is a single number: several replicas may run a Relay on one slot, and PostgreSQL lets
// exactly one of them stream while the others wait to take over.
type Relay struct {
	cfg     Config
	store   store
	logger  *slog.Logger
	metrics *Metrics
	alerter *delivery.Alerter
	// breaker records the partitions that stopped answering while others did, whose
	// events are parked (parking.go). It outlives sessions: a partition still down after
	// a reconnect is still known to be.
	breaker *delivery.PartitionBreaker
	// publishTimeouts and probeTimeouts back off the publish timeout of the
	// publisher's sends and of the prober's after transport failures (send).
	publishTimeouts, probeTimeouts delivery.PublishTimeouts
	// replayed carries nudges to look for events an operator replayed from the DLQ:
	// replay is an UPDATE, which the insert-only stream does not carry.
	replayed chan struct{}
	// unmarked are the events the publisher got acknowledged whose marks have not
	// finished: their rows still look unpublished, yet they must not block their
	// aggregates' next events (holdBack).
	unmarked idSet
}

// NewRelay returns a CDC relay over the outbox in pool (used for marks and stats; the
// stream has a connection of its own, opened from cfg.DatabaseURL). It starts nothing;
// call Run.
func NewRelay(pool *pgxpool.Pool, cfg Config, logger *slog.Logger, metrics *Metrics) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("CDC relay config: %w", err)
	}
	cfg = cfg.withDefaults()
	logger = logger.With(slog.String("component", "outbox_cdc_relay"), slog.String("slot", cfg.Slot))
	return &Relay{
		cfg:      cfg,
		store:    store{pool: pool},
		logger:   logger,
		metrics:  metrics,
		alerter:  delivery.NewAlerter(delivery.AlertConfig{WebhookURL: cfg.AlertWebhookURL, RoutingKey: cfg.AlertRoutingKey, Timeout: cfg.AlertTimeout, Secret: cfg.AlertSecret}, logger),
		breaker:  delivery.NewPartitionBreaker(cfg.OutageBackoffBase, cfg.OutageBackoffMax),
		replayed: make(chan struct{}, 1),
	}, nil
}

// Replayed tells the relay that an operator sent events back from the DLQ. New events
// need no such nudge (the stream carries them), but a replay is an UPDATE, which the
// insert-only stream does not carry: the relay looks for replayed events at its next
// turn, and on its own every StatusInterval for replays made through another replica.
// It never blocks.
func (r *Relay) Replayed() {
	select {
	case r.replayed <- struct{}{}:
	default:
	}
}

// Run streams until ctx ends. It reconnects after any failure of the replication
// connection (a PostgreSQL restart, a terminated walsender), waits while another relay
// holds the slot, and resumes from the slot's confirmed position each time. On ctx's
// end it stops at once, within one PublishTimeout plus two QueryTimeouts (the marks
// still running, then the last confirm): a batch whose publish is cut short is not
// confirmed, so the next relay streams it again (duplicates, never a gap), and rows
// Kafka already acknowledged are still marked and confirmed. Unlike
// the polling relay it needs no grace period, because it holds no lease that another
// relay would have to wait out. It returns an error only when it cannot start.
func (r *Relay) Run(ctx context.Context) error {
	client, err := kgo.NewClient(r.clientOpts()...)
	if err != nil {
		return fmt.Errorf("new Kafka producer: %w", err)
	}
	defer client.Close()
	r.run(ctx, client)
	return nil
}

// run is Run's loop on the producer p (a fake broker in tests).
func (r *Relay) run(ctx context.Context, p delivery.Producer) {
	var wg sync.WaitGroup
	defer wg.Wait()
	monitor := delivery.PendingMonitor{Pool: r.store.pool, Metrics: r.metrics.shared, Logger: r.logger,
		Interval: r.cfg.StatsInterval, QueryTimeout: r.cfg.QueryTimeout, AlertAge: r.cfg.OldestPendingAlert,
		Also: r.refreshSlotStats}
	wg.Go(func() { monitor.Run(ctx) })
	r.logger.Info("CDC relay started", slog.String("publication", r.cfg.Publication), slog.String("topic", r.cfg.Topic))
	for {
		err := r.session(ctx, p)
		r.metrics.streaming.Set(0)
		switch {
		case ctx.Err() != nil:
			r.logger.Info("CDC relay stopped")
			return
		case errors.Is(err, errSlotBusy):
			r.logger.Debug("another relay streams from the slot; waiting to take over")
		case err != nil:
			r.logger.Warn("replication stream lost; reconnecting", slog.Any("err", err),
				slog.Duration("in", r.cfg.ReconnectInterval))
		}
		select {
		case <-ctx.Done():
			r.logger.Info("CDC relay stopped")
			return
		case <-time.After(r.cfg.ReconnectInterval):
		}
	}
}

// clientOpts are the producer options of both relays (delivery.ClientOpts says why
// each one), with the topic as the default, then the config's own.
func (r *Relay) clientOpts() []kgo.Opt {
	return delivery.ClientOpts(r.cfg.Brokers, r.cfg.PublishTimeout,
		append([]kgo.Opt{kgo.DefaultProduceTopic(r.cfg.Topic)}, r.cfg.ClientOpts...)...)
}

// session is one replication connection: make sure the slot exists and has been caught
// up, then stream from it until something fails or ctx ends.
func (r *Relay) session(ctx context.Context, p delivery.Producer) error {
	r.unmarked.clear() // the last session's marks have all returned (pipeline.finish)
	conn, err := connect(ctx, r.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.QueryTimeout)
		defer cancel()
		conn.close(closeCtx)
	}()
	// With a multi-host DATABASE_URL the connection reached the primary of the moment,
	// which after a failover is a promoted standby: it has the outbox rows but not the
	// slot (before PostgreSQL 17 a logical slot lives on one server only), so the relay
	// creates the slot there and catches up every row still pending, which includes the
	// rows the old primary's slot had streamed but the relay had not marked.
	server := slog.String("server", conn.conn.Conn().RemoteAddr().String())
	if err := r.replaceLostSlot(ctx); err != nil {
		return err
	}
	snapshot, err := conn.createSlotIfMissing(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	if snapshot != "" {
		r.logger.Info("created replication slot", server)
	}
	if err := r.catchUp(ctx, p, snapshot); err != nil {
		return err
	}
	if err := conn.start(ctx, r.cfg.Slot, r.cfg.Publication); err != nil {
		return err
	}
	r.metrics.streaming.Set(1)
	r.logger.Info("streaming from the replication slot", server)
	return r.stream(ctx, conn, p)
}

// catchUp publishes what the slot cannot stream: the rows that were pending before it
// existed. A slot created just now comes with the snapshot it starts from, and the rows
// pending in it are exactly those (no gap, no overlap with the stream). A slot that
// existed but whose catch-up never finished (its relay stopped first) gets every
// pending row instead: some are streamed again, which is a duplicate, never a gap.
func (r *Relay) catchUp(ctx context.Context, p delivery.Producer, snapshot string) error {
	queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	if snapshot != "" {
		if err := r.store.forgetCatchUp(queryCtx, r.cfg.Slot); err != nil {
			return err
		}
	} else if done, err := r.store.caughtUp(queryCtx, r.cfg.Slot); err != nil || done {
		return err
	}
	events, err := r.store.pendingAt(ctx, snapshot, false)
	if err != nil {
		return err
	}
	r.logger.Info("catching up the rows pending before the slot", slog.Int("events", len(events)),
		slog.Bool("from_snapshot", snapshot != ""))
	for start := 0; start < len(events); start += r.cfg.BatchSize {
		if err := r.publishAndMark(ctx, p, events[start:min(start+r.cfg.BatchSize, len(events))]); err != nil {
			return err
		}
	}
	markCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	return r.store.markCaughtUp(markCtx, r.cfg.Slot)
}
