package consumer

// One drain: a fresh topic filled with records, consumed by one or more instances of the
// antifraud consumer in one fresh group, into a fresh database.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/antifraud"
	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/migrations"
)

// drainTimeout bounds one drain.
const drainTimeout = 10 * time.Minute

// drain fills a fresh topic with records, consumes it with instances consumers in one
// fresh group (each on a pool of its own, as separate processes would be) into a fresh
// database, checks that every payment has its one decision, and returns the records
// consumed per second, from the consumers' start (group join included) until every
// record is accounted for as processed or duplicate. tracer, when set, sees every
// statement of the consumers (statements.go).
func drain(ctx context.Context, env benchenv.Env, records []*kgo.Record, instances int, tracer *statementTracer) (float64, error) {
	topic, dropTopic, err := env.CreateTopic(ctx, "bench.consumer")
	if err != nil {
		return 0, err
	}
	defer dropTopic()
	for _, r := range records {
		r.Topic = topic
	}
	if err := produce(ctx, env.Kafka, records); err != nil {
		return 0, err
	}
	dbURL, dropDB, err := env.MigratedDatabase(ctx, "bench_antifraud", migrations.Antifraud)
	if err != nil {
		return 0, err
	}
	defer dropDB()
	if tracer != nil {
		if err := benchenv.ResetStatements(ctx, dbURL); err != nil {
			return 0, err
		}
	}

	// One Metrics for every instance, as for the consumers of one process: the counters
	// add up the group's work.
	reg := prometheus.NewRegistry()
	metrics, err := antifraud.NewMetrics(reg)
	if err != nil {
		return 0, err
	}
	group := devstack.UniqueName("bench-antifraud-")
	var consumers []*antifraud.Consumer
	for range instances {
		pool, err := openPool(ctx, dbURL, tracer)
		if err != nil {
			return 0, err
		}
		defer pool.Close()
		c, err := antifraud.NewConsumer(pool, antifraud.Config{Brokers: env.Brokers, Topic: topic, Group: group},
			slog.New(slog.DiscardHandler), metrics)
		if err != nil {
			return 0, err
		}
		consumers = append(consumers, c)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, instances)
	start := time.Now()
	for _, c := range consumers {
		go func() { done <- c.Run(runCtx) }()
	}
	stopped := 0
	// stopAll stops the consumers and waits for every one of them.
	stopAll := func() error {
		stop()
		var errs []error
		for ; stopped < instances; stopped++ {
			errs = append(errs, <-done)
		}
		return errors.Join(errs...)
	}
	defer stopAll()

	elapsed, err := waitConsumed(ctx, reg, float64(len(records)), start, done)
	if errors.Is(err, errStoppedEarly) {
		stopped++ // waitConsumed took that consumer's result from done
	}
	if err != nil {
		return 0, err
	}
	if err := stopAll(); err != nil {
		return 0, fmt.Errorf("stop consumers: %w", err)
	}
	if err := checkDecisions(ctx, dbURL, len(records)); err != nil {
		return 0, err
	}
	if tracer != nil {
		if err := tracer.statsTo(dbURL); err != nil {
			return 0, err
		}
	}
	return float64(len(records)) / elapsed.Seconds(), nil
}

// errStoppedEarly is a consumer that returned before the drain was over.
var errStoppedEarly = errors.New("consumer stopped early")

// waitConsumed polls the counters every 20 ms until want records are accounted for
// and returns the time since start, or fails when a consumer stops early (having taken
// its result from done) or the drain times out.
func waitConsumed(ctx context.Context, reg *prometheus.Registry, want float64, start time.Time, done <-chan error) (time.Duration, error) {
	deadline := time.Now().Add(drainTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		seen, err := counters(reg, "antifraud_processed_total", "antifraud_duplicates_total")
		if err != nil {
			return 0, err
		}
		if seen >= want {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("consumed %.0f of %.0f records within %s", seen, want, drainTimeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-done:
			return 0, fmt.Errorf("%w: %w", errStoppedEarly, err)
		case <-tick.C:
		}
	}
}

// checkDecisions checks that the drain decided every payment once: records holds each
// payment's event once or twice, and the payments are distinct.
func checkDecisions(ctx context.Context, dbURL string, records int) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	var decisions, processed, totals int
	err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM decisions), (SELECT count(*) FROM processed_events),
		(SELECT coalesce(sum(payment_count), 0) FROM user_totals)`).Scan(&decisions, &processed, &totals)
	if err != nil {
		return fmt.Errorf("count decisions: %w", err)
	}
	if decisions != processed || totals != processed || processed == 0 || records%processed != 0 {
		return fmt.Errorf("%d decisions, %d processed events and %d payments in the totals for %d records: want one of each per payment",
			decisions, processed, totals, records)
	}
	return nil
}

// openPool opens a pool on dbURL whose statements tracer sees, when set.
func openPool(ctx context.Context, dbURL string, tracer *statementTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return pool, nil
}

// counters sums the values of the named counters in reg.
func counters(reg *prometheus.Registry, names ...string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather metrics: %w", err)
	}
	var sum float64
	found := 0
	for _, f := range families {
		for _, name := range names {
			if f.GetName() == name {
				found++
				for _, m := range f.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	if found != len(names) {
		return 0, errors.New("consumer metrics not registered")
	}
	return sum, nil
}
