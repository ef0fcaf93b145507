package main

// The drain measurement, one code path for every relay: a backlog committed before the
// relay starts, the time until the relay has published all of it, and what the drain
// cost the database (pgcost.go), measured around the drain only.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// drainTimeout bounds one drain of n events: 5 minutes, or the time to drain them at
// 500 events/s if that is longer (the scale benchmark's backlogs reach 1,000,000). That
// is below the slowest drain docs/bench.md records
// (scale_cdc_drain_events_per_s_backlog_1000000_min), so that a loaded machine finishes
// and only a stuck relay times out.
func drainTimeout(n int) time.Duration {
	return max(5*time.Minute, time.Duration(n/500)*time.Second)
}

// drainResult is one drain of one relay.
type drainResult struct {
	eventsPerSecond float64
	cost            pgCost // per published event
}

// drainSetup is what a drain runs on.
type drainSetup struct {
	admin   *pgxpool.Pool // the admin database: reads the statistics, never the benchmark's tables
	dbURL   string        // the benchmark database, which holds the relay's table
	topic   string
	backlog int
	// around, when set, is called just before the relay starts and returns what to call
	// once it has stopped: the hook of the profiles (relay_diagnose.go).
	around func() (after func() error, err error)
	// tracer, when set, sees every statement of the relay's pool: the claim recorder of
	// -explain (relay_diagnose.go).
	tracer pgx.QueryTracer
}

// measureDrain fills the relay's table with a backlog, then lets the relay drain it.
//
// Each phase opens its own pool and closes it before the statistics are read, and the
// statistics are read only once no client is connected to the database: a backend
// reports its commits to pg_stat_database when it exits at the latest, so no commit is
// missed and none of the backlog's is counted. The checks for "drained" run on the
// relay's pool and are subtracted from the commits.
func measureDrain(ctx context.Context, relay relayUnderTest, s drainSetup) (drainResult, error) {
	fillPool, err := pgxpool.New(ctx, s.dbURL)
	if err != nil {
		return drainResult{}, fmt.Errorf("open pool: %w", err)
	}
	err = relay.fill(ctx, fillPool, s.backlog)
	fillPool.Close()
	if err != nil {
		return drainResult{}, err
	}
	dbName, err := databaseName(s.dbURL)
	if err != nil {
		return drainResult{}, err
	}
	before, err := readPGCounters(ctx, s.admin, dbName)
	if err != nil {
		return drainResult{}, err
	}

	elapsed, checks, err := runDrain(ctx, relay, s)
	if err != nil {
		return drainResult{}, err
	}

	after, err := readPGCounters(ctx, s.admin, dbName)
	if err != nil {
		return drainResult{}, err
	}
	total := after.minus(before)
	total.commits -= float64(checks)
	return drainResult{
		eventsPerSecond: float64(s.backlog) / elapsed.Seconds(),
		cost:            total.per(float64(s.backlog)),
	}, nil
}

// runDrain starts the relay on a pool of its own, waits until the backlog is published,
// stops the relay and closes the pool. It returns the time from the relay's start to
// the check that found nothing pending, and how many checks it made.
func runDrain(ctx context.Context, relay relayUnderTest, s drainSetup) (time.Duration, int, error) {
	cfg, err := pgxpool.ParseConfig(s.dbURL)
	if err != nil {
		return 0, 0, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = 32
	if s.tracer != nil {
		cfg.ConnConfig.Tracer = s.tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()

	after := func() error { return nil }
	if s.around != nil {
		if after, err = s.around(); err != nil {
			return 0, 0, err
		}
	}
	start := time.Now()
	r, err := relay.start(ctx, pool, s.topic)
	if err != nil {
		return 0, 0, err
	}
	r.wake()
	checks, waitErr := waitDrained(ctx, relay, pool, r, drainTimeout(s.backlog))
	elapsed := time.Since(start)
	stopErr := r.stop()
	if err := after(); err != nil {
		return 0, 0, err
	}
	if waitErr != nil {
		return 0, 0, waitErr
	}
	if stopErr != nil {
		return 0, 0, fmt.Errorf("stop relay: %w", stopErr)
	}
	return elapsed, checks, nil
}

// waitDrained polls every 10 ms until nothing is pending, the relay fails or timeout
// passes. It returns how many checks it made.
func waitDrained(ctx context.Context, relay relayUnderTest, pool *pgxpool.Pool, r *running, timeout time.Duration) (int, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for checks := 1; ; checks++ {
		pending, err := relay.pending(ctx, pool)
		if err != nil {
			return checks, err
		}
		if !pending {
			return checks, nil
		}
		select {
		case <-ctx.Done():
			return checks, ctx.Err()
		case <-r.done:
			return checks, fmt.Errorf("relay stopped during the drain: %w", r.err)
		case <-deadline.C:
			return checks, fmt.Errorf("backlog not drained after %s", timeout)
		case <-tick.C:
		}
	}
}
