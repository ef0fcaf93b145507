// Package scale is the scale benchmark (go run ./cmd/bench scale): how the relays' cost
// grows with the work and with the table. Start at Run. In the same run, on the same
// PostgreSQL and Kafka broker:
//
//   - for each backlog size (-backlogs), the drain rate of the polling relay and of the
//     CDC relay (-relays poll: the polling relay's alone; internal/bench/measure, the
//     code the relay and cdc benchmarks use);
//   - for each history size (-history: published rows in the table, before any
//     cleanup), the latency from commit to consumed at a steady rate for both relays,
//     the polling relay's claim statement's own time, the rate of the relay's real
//     cleaner (rows deleted per second, one day of history per cycle), what the table
//     and its indexes weigh before and after one cycle, and the same retention done by
//     dropping day partitions of a partitioned copy of the table (scale_partitioned.go).
//
// The rows are made by internal/bench/benchenv, the one place that knows the outbox's
// schema. Each figure is the median of -reps repetitions with its min and max, and the
// median load average while it was taken.
package scale

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/measure"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/benchreport"
)

// scaleBenchConfig is the scale benchmark's settings, from its flags.
type scaleBenchConfig struct {
	backlogs  []int
	histories []int
	days      int // days of history; each cleanup cycle removes one
	// withCDC is whether the drains measure the CDC relay beside the polling relay
	// (-relays): a run about one relay's curve need not wait for the other's.
	withCDC       bool
	measure.Flags // without -backlog: backlogs instead
}

func parseScaleFlags(args []string, stdout io.Writer) (scaleBenchConfig, error) {
	c := scaleBenchConfig{}
	var backlogs, histories, relays string
	fs := flag.NewFlagSet("bench scale", flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.StringVar(&backlogs, "backlogs", "10000,100000,1000000", "comma-separated backlog sizes to drain; empty for none")
	fs.StringVar(&histories, "history", "1000000,10000000", "comma-separated sizes of published history to measure beside; empty for none")
	fs.IntVar(&c.days, "history-days", 8, "days the history spans; each cleanup repetition removes the oldest one")
	fs.StringVar(&relays, "relays", "poll,cdc", "relays whose drains are measured: poll,cdc or poll")
	c.Define(fs, false)
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("parse flags: %w", err)
	}
	var err error
	if c.backlogs, err = parseSizes(backlogs); err != nil {
		return c, fmt.Errorf("-backlogs: %w", err)
	}
	if c.histories, err = parseSizes(histories); err != nil {
		return c, fmt.Errorf("-history: %w", err)
	}
	switch relays {
	case "poll,cdc":
		c.withCDC = true
	case "poll":
	default:
		return c, fmt.Errorf("-relays %q: want poll,cdc or poll", relays)
	}
	if err := c.Check(); err != nil {
		return c, err
	}
	if c.days <= c.Reps {
		return c, fmt.Errorf("-history-days (%d) must exceed -reps (%d): each cleanup repetition removes one day", c.days, c.Reps)
	}
	return c, nil
}

func parseSizes(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive size", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// scaleBench is one run of the scale benchmark.
type scaleBench struct {
	benchenv.Env
	cfg scaleBenchConfig
	measure.Pair
	stdout io.Writer
	report map[string]any
}

// Run runs the scale benchmark with the flags in args (-h lists them) and merges its
// figures into the report.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return benchenv.Run(ctx, args, getenv, stdout, parseScaleFlags, func(env benchenv.Env, cfg scaleBenchConfig) error {
		b := scaleBench{
			Env: env, cfg: cfg, stdout: stdout, Pair: measure.NewPair(env.Brokers),
			report: map[string]any{
				"scale_bench_reps":        cfg.Reps,
				"scale_bench_measured_at": time.Now().UTC().Format(time.RFC3339),
				"scale_bench_note": "go run ./cmd/bench scale: medians of scale_bench_reps repetitions (_min, _max; scale_*_load_avg_1m: the machine's load); " +
					"poll = internal/outbox's relay (4 workers x 1000), cdc = internal/outbox/cdc's relay; " +
					"_backlog_N: drain of N pending events; _history_N: N published rows in the table (history over scale_bench_history_days days), " +
					"latency = commit to consumed at scale_bench_latency_rate_per_s, claim = the polling relay's claim statement (empty claims included), " +
					"cleanup = one cycle of outbox.Cleaner removing the oldest day, partition_drop = the same day dropped from a partitioned copy; " +
					"sizes in bytes (table = heap with TOAST, indexes = all indexes), after one cycle without VACUUM; docs/bench.md",
			},
		}
		// Each size is merged into the report as soon as it is measured: a run of the
		// defaults takes the better part of an hour, and what was measured before a failure
		// is kept.
		for _, n := range cfg.backlogs {
			if err := b.drains(ctx, n); err != nil {
				return fmt.Errorf("backlog of %d: %w", n, err)
			}
			if err := benchreport.Merge(cfg.Report, b.report); err != nil {
				return err
			}
		}
		for _, n := range cfg.histories {
			if err := b.history(ctx, n); err != nil {
				return fmt.Errorf("history of %d: %w", n, err)
			}
			if err := benchreport.Merge(cfg.Report, b.report); err != nil {
				return err
			}
		}
		return nil
	})
}

// drains measures the drain of a backlog of n, for both relays, each on a database of
// its own.
func (b scaleBench) drains(ctx context.Context, n int) error {
	rb := measure.Bench{Env: b.Env, Backlog: n}
	pollURL, cdcURL, drop, err := rb.PairDatabases(ctx, "bench_scale", b.stdout)
	if err != nil {
		return err
	}
	defer drop()
	var poll, cdc, load benchreport.Samples
	for rep := 1; rep <= b.cfg.Reps; rep++ {
		p, err := rb.Drain(ctx, b.Poll, pollURL, nil)
		if err != nil {
			return fmt.Errorf("polling relay's drain: %w", err)
		}
		poll, load = append(poll, p.EventsPerSecond), append(load, benchenv.LoadAverage())
		if !b.cfg.withCDC {
			fmt.Fprintf(b.stdout, "backlog %d, repetition %d (load %.2f): drain poll %.0f events/s\n",
				n, rep, load[len(load)-1], p.EventsPerSecond)
			continue
		}
		c, err := rb.Drain(ctx, b.CDC, cdcURL, nil)
		if err != nil {
			return fmt.Errorf("CDC relay's drain: %w", err)
		}
		cdc = append(cdc, c.EventsPerSecond)
		fmt.Fprintf(b.stdout, "backlog %d, repetition %d (load %.2f): drain poll %.0f, cdc %.0f events/s\n",
			n, rep, load[len(load)-1], p.EventsPerSecond, c.EventsPerSecond)
	}
	suffix := "_backlog_" + strconv.Itoa(n)
	poll.AddTo(b.report, "scale_poll_drain_events_per_s"+suffix, benchreport.Tenths)
	if b.cfg.withCDC {
		cdc.AddTo(b.report, "scale_cdc_drain_events_per_s"+suffix, benchreport.Tenths)
	}
	load.AddTo(b.report, "scale_drain_load_avg_1m"+suffix, benchreport.Hundredths)
	return nil
}

func (b scaleBench) dropSlotOf(ctx context.Context, dbURL string) {
	if err := measure.DropSlot(context.WithoutCancel(ctx), b.Admin, dbURL); err != nil {
		fmt.Fprintln(b.stdout, "warning:", err)
	}
}
