// Package relay is the relay benchmark (go run ./cmd/bench relay) and the SQL ladder
// (go run ./cmd/bench ladder). Start at Run.
//
// The relay benchmark is our relay against the floor, in the same run, on the same
// PostgreSQL and the same Kafka broker, measured by internal/bench/measure. Each
// repetition measures
//
//   - the drain rate of a backlog (100,000 events by default) committed before the relay
//     starts, for our relay, for the floor (a minimal relay on a minimal table of its own,
//     minimal.go) and for the same minimal relay on our table (the same-schema
//     comparison), with WAL bytes, WAL records, WAL flushes and commits per event;
//   - the latency from commit to consumed at a steady 1,000 events/s, for our relay and
//     the floor, quiet and then beside the API's load (apiload.go).
//
// Each figure in reports/bench.json is the median of the repetitions, with its min and
// max. Flags ask for the relay's CPU and block profiles, the plan of its claim and
// per-statement figures (diagnose.go; docs/bench.md). With KAFKA_CLUSTER_BROKERS it
// measures our relay on a three-node cluster too (cluster.go).
//
// The ladder (Ladder, ladder.go) prices each of the relay's guarantees in the database
// alone, without Kafka.
package relay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/dscourse/payments-outbox/internal/bench/measure"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/benchreport"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
	"github.com/dscourse/payments-outbox/migrations"
)

// relayBenchConfig is the relay benchmark's settings, from its flags.
type relayBenchConfig struct {
	measure.Flags
	// apiLoadClients is -api-load: pgbench's clients beside the latencies measured
	// under the API's load (apiload.go); 0 measures none.
	apiLoadClients int
	diagnose       diagnoseConfig
}

func parseRelayFlags(args []string, stdout io.Writer) (relayBenchConfig, error) {
	var c relayBenchConfig
	fs := flag.NewFlagSet("bench relay", flag.ContinueOnError)
	fs.SetOutput(stdout)
	c.Define(fs, true)
	fs.StringVar(&c.diagnose.cpuProfile, "cpuprofile", "", "write a CPU profile of our relay's drain to this file")
	fs.StringVar(&c.diagnose.blockProfile, "blockprofile", "", "write a block profile of our relay's drain to this file")
	fs.BoolVar(&c.diagnose.explain, "explain", false, "print EXPLAIN (ANALYZE, BUFFERS) of our relay's claim at a full backlog")
	fs.BoolVar(&c.diagnose.statements, "statements", false, "print per-statement figures from pg_stat_statements for a drain of each relay")
	fs.StringVar(&c.diagnose.latencyTrace, "latency-trace", "", "write every event of each latency measurement to <prefix>-<relay>-<rep>.csv (when it committed, its latency, its wait for a claim), "+
		"the relay's produce requests and the consumer's fetches to <prefix>-<relay>-<rep>-produce.csv and -fetch.csv, and print the Go runtime's GC pauses and scheduling latencies")
	fs.StringVar(&c.diagnose.goTrace, "trace", "", "write a Go execution trace of each latency measurement to <prefix>-<relay>-<rep>.trace (go tool trace)")
	fs.IntVar(&c.apiLoadClients, "api-load", defaultAPILoadClients, "pgbench clients committing the API's transaction beside a second latency measurement of each relay; 0 for none")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("parse flags: %w", err)
	}
	if c.apiLoadClients < 0 {
		return c, errors.New("-api-load must be 0 (no load) or a number of clients")
	}
	return c, c.Check()
}

// relayFigures are one repetition's measurements.
type relayFigures struct {
	relay, floor, sameSchema   measure.DrainResult
	relayLatency, floorLatency measure.LatencyResult
	// otherReplicaLatency is our relay's latency for events committed by another
	// process, which no nudge announces (measure.PollRelay.Unnudged).
	otherReplicaLatency measure.LatencyResult
	// relayUnderLoad and floorUnderLoad are the latencies beside the API's load
	// (apiload.go); zero without -api-load.
	relayUnderLoad, floorUnderLoad loadedLatency
	loadAvg                        float64
	// cluster is our relay on the three-node cluster (cluster.go); nil without
	// KAFKA_CLUSTER_BROKERS.
	cluster *clusterFigures
}

// Run runs the relay benchmark with the flags in args (-h lists them) and merges its
// figures into the report.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return benchenv.Run(ctx, args, getenv, stdout, parseRelayFlags, func(env benchenv.Env, cfg relayBenchConfig) error {
		relayCfg, err := relayConfigFromEnv(getenv, env.Brokers)
		if err != nil {
			return err
		}
		ourURL, dropOurs, err := env.MigratedDatabase(ctx, "bench_relay", migrations.Payments)
		if err != nil {
			return err
		}
		defer dropOurs()
		floorURL, dropFloor, err := env.CreateDatabase(ctx, "bench_floor")
		if err != nil {
			return err
		}
		defer dropFloor()
		if err := benchenv.ExecOnce(ctx, floorURL, floorTableSQL); err != nil {
			return fmt.Errorf("create floor table: %w", err)
		}
		b := relayBench{
			Bench: cfg.Bench(env),
			cfg:   cfg, ourURL: ourURL, floorURL: floorURL, stdout: stdout,
			ours:       measure.PollRelay{Config: relayCfg, Logger: slog.New(slog.DiscardHandler)},
			floor:      floorRelay{brokers: env.Brokers},
			sameSchema: sameSchemaRelay{brokers: env.Brokers},
		}
		cluster, err := newClusterBench(ctx, b, getenv)
		if err != nil {
			return err
		}
		if cluster != nil {
			defer cluster.close()
		}
		if cfg.diagnose.explain {
			b.claims = &claimRecorder{}
			b.Tracer = b.claims
		}

		var all []relayFigures
		for rep := 1; rep <= cfg.Reps; rep++ {
			f, err := b.repetition(ctx, rep)
			if err != nil {
				return fmt.Errorf("repetition %d: %w", rep, err)
			}
			if cluster != nil {
				if f.cluster, err = cluster.repetition(ctx); err != nil {
					return fmt.Errorf("repetition %d: %w", rep, err)
				}
			}
			printRepetition(stdout, rep, f, relayCfg, cfg.LatencyRate)
			all = append(all, f)
		}
		if err := b.diagnose(ctx, stdout); err != nil {
			return err
		}
		report := relayReport(all, cfg, relayCfg)
		printSummary(stdout, report)
		return benchreport.Merge(cfg.Report, report)
	})
}

// relayConfigFromEnv is the relay's defaults, unless RELAY_WORKERS / RELAY_BATCH_SIZE say
// otherwise (to measure other settings; the report records which were used).
func relayConfigFromEnv(getenv func(string) string, brokers []string) (poll.Config, error) {
	cfg := poll.Config{Brokers: brokers, Workers: 4, BatchSize: 1000}
	var err error
	if v := getenv("RELAY_WORKERS"); v != "" {
		if cfg.Workers, err = strconv.Atoi(v); err != nil {
			return cfg, fmt.Errorf("RELAY_WORKERS=%q: %w", v, err)
		}
	}
	if v := getenv("RELAY_BATCH_SIZE"); v != "" {
		if cfg.BatchSize, err = strconv.Atoi(v); err != nil {
			return cfg, fmt.Errorf("RELAY_BATCH_SIZE=%q: %w", v, err)
		}
	}
	return cfg, nil
}

// relayBench is one run of the relay benchmark: its databases, broker and relays.
type relayBench struct {
	measure.Bench
	cfg              relayBenchConfig
	ourURL, floorURL string
	stdout           io.Writer
	ours             measure.PollRelay
	floor            floorRelay
	sameSchema       sameSchemaRelay
	// claims records our relay's claim statement for -explain (and is then Bench.Tracer);
	// nil without it.
	claims *claimRecorder
}

// repetition measures every figure once: the three drains, then the two latencies.
// rep numbers the repetition from 1.
func (b relayBench) repetition(ctx context.Context, rep int) (relayFigures, error) {
	var f relayFigures
	var err error
	if f.relay, err = b.Drain(ctx, b.ours, b.ourURL, nil); err != nil {
		return f, fmt.Errorf("our relay's drain: %w", err)
	}
	if f.floor, err = b.Drain(ctx, b.floor, b.floorURL, nil); err != nil {
		return f, fmt.Errorf("floor drain: %w", err)
	}
	if f.sameSchema, err = b.Drain(ctx, b.sameSchema, b.ourURL, nil); err != nil {
		return f, fmt.Errorf("same-schema minimal relay's drain: %w", err)
	}
	// The two latencies take turns going first, so that neither is always the one
	// measured right after the drains; so do the two under the API's load.
	if err := takeTurns(rep, func() (err error) {
		if f.relayLatency, err = b.latency(ctx, b.ours, b.ourURL, "ours", rep, nil); err != nil {
			return fmt.Errorf("our relay's latency: %w", err)
		}
		return nil
	}, func() (err error) {
		if f.floorLatency, err = b.latency(ctx, b.floor, b.floorURL, "floor", rep, nil); err != nil {
			return fmt.Errorf("floor latency: %w", err)
		}
		return nil
	}); err != nil {
		return f, err
	}
	unnudged := b.ours
	unnudged.Unnudged = true
	if f.otherReplicaLatency, err = b.latency(ctx, unnudged, b.ourURL, "other-replica", rep, nil); err != nil {
		return f, fmt.Errorf("our relay's latency for another replica's commits: %w", err)
	}
	if b.cfg.apiLoadClients > 0 {
		if err := takeTurns(rep, func() (err error) {
			if f.relayUnderLoad, err = b.latencyUnderAPILoad(ctx, b.ours, b.ourURL, "ours-api-load", rep); err != nil {
				return fmt.Errorf("our relay's latency under the API's load: %w", err)
			}
			return nil
		}, func() (err error) {
			if f.floorUnderLoad, err = b.latencyUnderAPILoad(ctx, b.floor, b.floorURL, "floor-api-load", rep); err != nil {
				return fmt.Errorf("floor latency under the API's load: %w", err)
			}
			return nil
		}); err != nil {
			return f, err
		}
	}
	f.loadAvg = benchenv.LoadAverage()
	return f, nil
}

// takeTurns runs ours then floor in odd repetitions, floor then ours in even ones.
func takeTurns(rep int, ours, floor func() error) error {
	first, second := ours, floor
	if rep%2 == 0 {
		first, second = floor, ours
	}
	if err := first(); err != nil {
		return err
	}
	return second()
}
