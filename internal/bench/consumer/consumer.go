// Package consumer is the consumer benchmark (go run ./cmd/bench consumer): how fast the
// antifraud consumer works through a pre-filled topic of PaymentCreated events (100,000
// by default) with dedup on, from a fresh group into a fresh database, against the
// relay's drain of as many events measured in the same repetition. Each repetition
// measures
//
//   - the relay's drain (internal/bench/measure, with the relay benchmark's settings);
//   - one consumer instance, every event once: the figure of the goal, at least half the
//     relay's drain (consumer_to_relay_ratio);
//   - three instances in one group on the topic's three partitions, every event once;
//   - one instance, every event twice (the whole stream, then all of it again, as after
//     a relay that republished everything).
//
// Figures go to reports/bench.json as medians of the repetitions, ratios taken within
// each repetition. -statements adds one more drain of one instance after the
// repetitions, with the time of each statement (statements.go). Start at Run.
package consumer

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/bench/measure"
	"github.com/dscourse/payments-outbox/internal/benchreport"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
	"github.com/dscourse/payments-outbox/migrations"
	"github.com/twmb/franz-go/pkg/kgo"
)

// consumerBenchConfig is the benchmark's settings, from its flags.
type consumerBenchConfig struct {
	events     int
	reps       int
	statements bool
	cpuProfile string
	report     string
}

func parseFlags(args []string, stdout io.Writer) (consumerBenchConfig, error) {
	var c consumerBenchConfig
	fs := flag.NewFlagSet("bench consumer", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.IntVar(&c.events, "events", 100_000, "events on the topic, and in the relay's backlog")
	fs.IntVar(&c.reps, "reps", 3, "repetitions; each figure is their median, with min and max")
	fs.BoolVar(&c.statements, "statements", false, "after the repetitions, one more drain of one instance with the time of each statement, client side and from pg_stat_statements")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the benchmark process during that drain to this file (implies -statements)")
	fs.StringVar(&c.report, "report", benchreport.Path, "JSON report to merge the figures into")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("parse flags: %w", err)
	}
	if c.events < 1 || c.reps < 1 {
		return c, fmt.Errorf("-events and -reps must be positive")
	}
	c.statements = c.statements || c.cpuProfile != ""
	return c, nil
}

// relaySettings are the relay benchmark's (internal/bench/relay): 4 workers claiming
// 1,000 events each, so that consumer_to_relay_ratio compares with the relay's figure.
var relaySettings = poll.Config{Workers: 4, BatchSize: 1000}

// figures are one repetition's measurements, in events (or deliveries) per second.
type figures struct {
	relay, one, three, twice float64
	loadAvg                  float64
}

// Run runs the consumer benchmark with the flags in args (-h lists them) and merges its
// figures into the report.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	// The records are produced on the run's client. The fill is not what is measured:
	// large batches, no waiting per record.
	fill := []kgo.Opt{kgo.ProducerLinger(5 * time.Millisecond), kgo.ProducerBatchMaxBytes(1 << 20)}
	return benchenv.Run(ctx, args, getenv, stdout, parseFlags, func(env benchenv.Env, cfg consumerBenchConfig) error {
		relayURL, dropRelay, err := env.MigratedDatabase(ctx, "bench_relay", migrations.Payments)
		if err != nil {
			return err
		}
		defer dropRelay()
		relayCfg := relaySettings
		relayCfg.Brokers = env.Brokers
		relay := measure.PollRelay{Config: relayCfg, Logger: slog.New(slog.DiscardHandler)}
		bench := measure.Bench{Env: env, Backlog: cfg.events}
		records := paymentRecords(cfg.events)

		var all []figures
		for rep := 1; rep <= cfg.reps; rep++ {
			f := figures{loadAvg: benchenv.LoadAverage()}
			d, err := bench.Drain(ctx, relay, relayURL, nil)
			if err != nil {
				return fmt.Errorf("repetition %d: relay drain: %w", rep, err)
			}
			f.relay = d.EventsPerSecond
			if f.one, err = drain(ctx, env, freshCopies(records), 1, nil); err != nil {
				return fmt.Errorf("repetition %d: one instance: %w", rep, err)
			}
			if f.three, err = drain(ctx, env, freshCopies(records), 3, nil); err != nil {
				return fmt.Errorf("repetition %d: three instances: %w", rep, err)
			}
			if f.twice, err = drain(ctx, env, append(freshCopies(records), freshCopies(records)...), 1, nil); err != nil {
				return fmt.Errorf("repetition %d: each event twice: %w", rep, err)
			}
			printRepetition(stdout, rep, f)
			all = append(all, f)
		}
		if cfg.statements {
			if err := diagnose(ctx, env, records, cfg, stdout); err != nil {
				return err
			}
		}
		report := consumerReport(all, cfg)
		printSummary(stdout, report)
		return benchreport.Merge(cfg.report, report)
	}, fill...)
}
