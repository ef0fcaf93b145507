package measure

// The drain measurement, one code path for every relay: a backlog committed before the
// relay starts, the time until the relay has published all of it, and what the drain
// cost the database (pgcost.go), measured around the drain only.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
)

// drainTimeout bounds one drain of n events: 5 minutes, or the time to drain them at
// 500 events/s if that is longer (the scale benchmark's backlogs reach 1,000,000). That
// is below the slowest drain docs/bench.md records
// (scale_cdc_drain_events_per_s_backlog_1000000_min), so that a loaded machine finishes
// and only a stuck relay times out.
func drainTimeout(n int) time.Duration {
	return max(5*time.Minute, time.Duration(n/500)*time.Second)
}

// DrainResult is one drain of one relay.
type DrainResult struct {
	EventsPerSecond float64
	Cost            PGCost // per published event
}

// DrainSetup is what a drain runs on.
type DrainSetup struct {
	Admin   *pgxpool.Pool // the admin database: reads the statistics, never the benchmark's tables
	DBURL   string        // the benchmark database, which holds the relay's table
	Topic   string
	Backlog int
	// Around, when set, is called just before the relay starts and returns what to call
	// once it has stopped: the hook of the relay benchmark's profiles.
	Around func() (after func() error, err error)
	// Tracer, when set, sees every statement of the relay's pool: the claim recorder of
	// the relay benchmark's -explain.
	Tracer pgx.QueryTracer
	// Kafka, when set, is an admin client on Topic's broker: the drain asks the database
	// whether anything is pending only once Topic holds Backlog records (waitDrained).
	// Nil for relays that publish nowhere (the SQL ladder's).
	Kafka *kadm.Client
}

// MeasureDrain fills the relay's table with a backlog, then lets the relay drain it.
//
// Each phase opens its own pool and closes it before the statistics are read, and the
// statistics are read only once no client is connected to the database: a backend
// reports its commits to pg_stat_database when it exits at the latest, so no commit is
// missed and none of the backlog's is counted. The checks for "drained" run on the
// relay's pool and are subtracted from the commits.
func MeasureDrain(ctx context.Context, relay Relay, s DrainSetup) (DrainResult, error) {
	fillPool, err := pgxpool.New(ctx, s.DBURL)
	if err != nil {
		return DrainResult{}, fmt.Errorf("open pool: %w", err)
	}
	err = relay.Fill(ctx, fillPool, s.Backlog)
	fillPool.Close()
	if err != nil {
		return DrainResult{}, err
	}
	dbName, err := databaseName(s.DBURL)
	if err != nil {
		return DrainResult{}, err
	}
	before, err := readPGCounters(ctx, s.Admin, dbName)
	if err != nil {
		return DrainResult{}, err
	}

	elapsed, checks, err := runDrain(ctx, relay, s)
	if err != nil {
		return DrainResult{}, err
	}

	after, err := readPGCounters(ctx, s.Admin, dbName)
	if err != nil {
		return DrainResult{}, err
	}
	total := after.Minus(before)
	total.Commits -= float64(checks)
	return DrainResult{
		EventsPerSecond: float64(s.Backlog) / elapsed.Seconds(),
		Cost:            total.Per(float64(s.Backlog)),
	}, nil
}

// runDrain starts the relay on a pool of its own, waits until the backlog is published,
// stops the relay and closes the pool. It returns the time from the relay's start to
// the check that found nothing pending, and how many checks it made.
func runDrain(ctx context.Context, relay Relay, s DrainSetup) (time.Duration, int, error) {
	cfg, err := pgxpool.ParseConfig(s.DBURL)
	if err != nil {
		return 0, 0, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = 32
	if s.Tracer != nil {
		cfg.ConnConfig.Tracer = s.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()

	after := func() error { return nil }
	if s.Around != nil {
		if after, err = s.Around(); err != nil {
			return 0, 0, err
		}
	}
	start := time.Now()
	r, err := relay.Start(ctx, pool, s.Topic)
	if err != nil {
		return 0, 0, err
	}
	r.wake()
	checks, waitErr := waitDrained(ctx, relay, pool, r, s, drainTimeout(s.Backlog))
	elapsed := time.Since(start)
	stopErr := r.Stop()
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
// passes. It returns how many checks of the database it made.
//
// While the topic (when there is one) holds fewer records than the backlog, the relay
// cannot be done, and the poll asks the broker instead of the database: the check for
// pending rows reads past every row the relay has deleted so far, and run every 10 ms
// from the start it would take a core of the server from the relay at a backlog of
// 1,000,000, which makes a larger backlog look slower for the measurement's own sake.
func waitDrained(ctx context.Context, relay Relay, pool *pgxpool.Pool, r *Running, s DrainSetup, timeout time.Duration) (int, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	checks := 0
	for {
		published, err := topicHolds(ctx, s.Kafka, s.Topic, s.Backlog)
		if err != nil {
			return checks, err
		}
		if published {
			checks++
			pending, err := relay.Pending(ctx, pool)
			if err != nil {
				return checks, err
			}
			if !pending {
				return checks, nil
			}
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

// topicHolds reports whether topic's partitions hold at least n records together;
// true without an admin client, so that the caller checks the database at once.
func topicHolds(ctx context.Context, adm *kadm.Client, topic string, n int) (bool, error) {
	if adm == nil {
		return true, nil
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return false, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	return total >= int64(n), nil
}
