// Package cdc is the CDC benchmark (go run ./cmd/bench cdc): the change-data-capture
// relay beside the polling relay, in the same run, on the same PostgreSQL and Kafka
// broker, measured by the same code (internal/bench/measure). Start at Run. Each
// repetition measures
//
//   - the drain rate of a backlog (100,000 events by default) committed while the relay
//     was stopped, for the polling relay and for the CDC relay (whose slot existed
//     before the backlog, so the backlog comes down the stream, as after an outage);
//   - the latency from commit to consumed at a steady 1,000 events/s, for both.
//
// Each of these figures in reports/bench.json is the median of the repetitions, with its
// min and max, and the load average of each repetition is recorded beside them: other
// work on the machine lowers every figure.
//
// After the repetitions, once per run, the benchmark measures the WAL the CDC relay's
// slot holds back after an outage of the relay of 60 s while events keep being committed
// at that rate. That figure follows the server's write rate during the outage, not a
// comparison between the relays within a repetition; measuring it once spares the run a
// minute for each further repetition.
package cdc

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/measure"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/benchreport"
	"github.com/dscourse/payments-outbox/migrations"
)

// cdcBenchConfig is the CDC benchmark's settings, from its flags.
type cdcBenchConfig struct {
	measure.Flags
	outage time.Duration // -outage, default 60s
}

func parseCDCFlags(args []string, stdout io.Writer) (cdcBenchConfig, error) {
	var c cdcBenchConfig
	fs := flag.NewFlagSet("bench cdc", flag.ContinueOnError)
	fs.SetOutput(stdout)
	c.Define(fs, true)
	fs.DurationVar(&c.outage, "outage", 60*time.Second, "how long the CDC relay is stopped while events are committed at -latency-rate, once per run, after the repetitions (not repeated)")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("parse flags: %w", err)
	}
	if c.outage < time.Second {
		return c, fmt.Errorf("-outage must be at least 1s")
	}
	return c, c.Check()
}

// cdcFigures are one repetition's measurements.
type cdcFigures struct {
	pollDrain, cdcDrain     measure.DrainResult
	pollLatency, cdcLatency measure.LatencyResult
	floor                   streamFloors
	loadAvg                 float64
}

// Run runs the CDC benchmark with the flags in args (-h lists them) and merges its
// figures into the report.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return benchenv.Run(ctx, args, getenv, stdout, parseCDCFlags, func(env benchenv.Env, cfg cdcBenchConfig) error {
		pollURL, cdcURL, drop, err := cfg.Bench(env).PairDatabases(ctx, "bench", stdout)
		if err != nil {
			return err
		}
		defer drop()
		floorURL, dropFloor, err := env.MigratedDatabase(ctx, "bench_floor", migrations.Payments)
		if err != nil {
			return err
		}
		defer dropFloor()

		b := cdcBench{Env: env, cfg: cfg, pollURL: pollURL, cdcURL: cdcURL, floorURL: floorURL, Pair: measure.NewPair(env.Brokers)}
		var all []cdcFigures
		for rep := 1; rep <= cfg.Reps; rep++ {
			f, err := b.repetition(ctx)
			if err != nil {
				return fmt.Errorf("repetition %d: %w", rep, err)
			}
			printCDCRepetition(stdout, rep, f, cfg)
			all = append(all, f)
		}
		walRetained, err := b.outage(ctx)
		if err != nil {
			return fmt.Errorf("CDC outage: %w", err)
		}
		fmt.Fprintf(stdout, "WAL retained by the slot after a %s outage at %d/s (load average %.2f): %.0f bytes\n",
			cfg.outage, cfg.LatencyRate, benchenv.LoadAverage(), walRetained)
		report := cdcReport(all, walRetained, cfg)
		fmt.Fprintf(stdout, "medians of %d: drain poll %v, cdc %v events/s (ratio %v); latency p99 poll %v, cdc %v ms\n",
			cfg.Reps, report["cdc_bench_poll_drain_events_per_s"], report["cdc_drain_events_per_s"], report["cdc_to_poll_drain_ratio"],
			report["cdc_bench_poll_latency_p99_ms"], report["cdc_latency_p99_ms"])
		fmt.Fprintf(stdout, "medians of %d: stream floor %v events/s (cdc to floor %v, floor to poll %v), one event per transaction %v events/s\n",
			cfg.Reps, report["cdc_stream_floor_events_per_s"], report["cdc_to_stream_floor_ratio"], report["stream_floor_to_poll_ratio"],
			report["cdc_stream_floor_one_row_tx_events_per_s"])
		return benchreport.Merge(cfg.Report, report)
	})
}

// cdcBench is one run of the CDC benchmark.
type cdcBench struct {
	benchenv.Env
	cfg             cdcBenchConfig
	pollURL, cdcURL string
	// floorURL is the stream floor's database (streamfloor.go), apart so that its slot
	// never meets the CDC relay's.
	floorURL string
	measure.Pair
}

func (b cdcBench) repetition(ctx context.Context) (cdcFigures, error) {
	var f cdcFigures
	var err error
	rb := b.cfg.Bench(b.Env)
	if f.pollDrain, err = rb.Drain(ctx, b.Poll, b.pollURL, nil); err != nil {
		return f, fmt.Errorf("polling relay's drain: %w", err)
	}
	if f.cdcDrain, err = rb.Drain(ctx, b.CDC, b.cdcURL, nil); err != nil {
		return f, fmt.Errorf("CDC relay's drain: %w", err)
	}
	if f.floor, err = b.streamFloor(ctx, b.floorURL); err != nil {
		return f, fmt.Errorf("stream floor: %w", err)
	}
	if f.pollLatency, err = rb.Latency(ctx, b.Poll, b.pollURL); err != nil {
		return f, fmt.Errorf("polling relay's latency: %w", err)
	}
	if f.cdcLatency, err = rb.Latency(ctx, b.CDC, b.cdcURL); err != nil {
		return f, fmt.Errorf("CDC relay's latency: %w", err)
	}
	f.loadAvg = benchenv.LoadAverage()
	return f, nil
}

// outage stops the CDC relay (its slot exists and is caught up), commits events at the
// latency rate for the outage's length, and reads the WAL the slot then holds back.
// The WAL position is the server's, so the other databases' writes meanwhile count too:
// that is what the disk holds. It runs once, after the repetitions, so nothing needs the
// events it leaves: the slot and its database are dropped with them undelivered.
func (b cdcBench) outage(ctx context.Context) (float64, error) {
	pool, err := pgxpool.New(ctx, b.cdcURL)
	if err != nil {
		return 0, fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	if err := b.CDC.Fill(ctx, pool, 0); err != nil {
		return 0, err
	}
	total := int(b.cfg.outage.Seconds() * float64(b.cfg.LatencyRate))
	gen := measure.StartGenerator(ctx, pool, b.CDC, func() {}, b.cfg.LatencyRate, total)
	if err := gen.Wait(); err != nil {
		return 0, fmt.Errorf("generate events: %w", err)
	}
	return measure.WALRetained(ctx, b.Admin, b.cdcURL)
}

func printCDCRepetition(w io.Writer, rep int, f cdcFigures, cfg cdcBenchConfig) {
	fmt.Fprintf(w, "repetition %d (load average %.2f)\n", rep, f.loadAvg)
	fmt.Fprintf(w, "  drain of %d, polling relay   %8.0f events/s  (%.0f WAL bytes per event)\n", cfg.Backlog, f.pollDrain.EventsPerSecond, f.pollDrain.Cost.WALBytes)
	fmt.Fprintf(w, "  drain of %d, CDC relay       %8.0f events/s  (%.0f WAL bytes per event)\n", cfg.Backlog, f.cdcDrain.EventsPerSecond, f.cdcDrain.Cost.WALBytes)
	fmt.Fprintf(w, "  stream floor, one transaction %8.0f events/s, one event per transaction %8.0f events/s\n", f.floor.oneTransaction, f.floor.oneRowTransactions)
	for _, l := range []struct {
		name string
		r    measure.LatencyResult
	}{{"polling relay", f.pollLatency}, {"CDC relay", f.cdcLatency}} {
		fmt.Fprintf(w, "  latency at %d/s, %-13s p50 %6.1f ms, p99 %6.1f ms, max %6.1f ms (%d events, achieved %.0f/s)\n",
			cfg.LatencyRate, l.name, l.r.P50, l.r.P99, l.r.Max, l.r.Events, l.r.AchievedRate)
	}
}

// cdcReport turns the repetitions and the one outage into the report's fields: for each
// figure of the repetitions the median under its key, the extremes under key_min and
// key_max. The outage's figure is one measurement; its key_min and key_max equal it, so
// that promoting a run replaces the published spread too (Promote merges and never
// deletes a key).
func cdcReport(all []cdcFigures, walRetainedBytes float64, cfg cdcBenchConfig) map[string]any {
	report := map[string]any{
		"cdc_bench_backlog":     cfg.Backlog,
		"cdc_bench_reps":        cfg.Reps,
		"cdc_bench_outage_s":    cfg.outage.Seconds(),
		"cdc_bench_measured_at": time.Now().UTC().Format(time.RFC3339),
		"cdc_bench_note": "go run ./cmd/bench cdc: medians of cdc_bench_reps repetitions (_min, _max: the spread; cdc_bench_load_avg_1m: the machine's load), except wal_retained; " +
			"poll = internal/outbox's relay (4 workers x 1000), cdc = internal/outbox/cdc's relay, each on its own database, same broker, same run; " +
			"drain = a backlog committed while the relay was stopped (for cdc the slot existed, so it comes down the stream), until every row is marked published; " +
			"stream_floor = the same backlog read from a slot created before it by a bare pgoutput reader that parses every message and publishes and writes nothing (cdc_stream_floor_one_row_tx: each event in a transaction of its own), from START_REPLICATION to the backlog's last commit; " +
			"latency = commit to consumed at cdc_bench latency rate; " +
			"wal_retained = pg_current_wal_lsn() - restart_lsn of the slot after the relay was stopped for cdc_bench_outage_s while events were committed at that rate (server-wide WAL: other databases' writes count too), " +
			"measured once per run, after the repetitions (its _min and _max equal it)",
	}
	figures := []struct {
		key   string
		round func(float64) float64
		value func(cdcFigures) float64
	}{
		{"cdc_bench_poll_drain_events_per_s", benchreport.Tenths, func(f cdcFigures) float64 { return f.pollDrain.EventsPerSecond }},
		{"cdc_drain_events_per_s", benchreport.Tenths, func(f cdcFigures) float64 { return f.cdcDrain.EventsPerSecond }},
		{"cdc_to_poll_drain_ratio", benchreport.Hundredths, func(f cdcFigures) float64 { return f.cdcDrain.EventsPerSecond / f.pollDrain.EventsPerSecond }},
		{"cdc_stream_floor_events_per_s", benchreport.Tenths, func(f cdcFigures) float64 { return f.floor.oneTransaction }},
		{"cdc_to_stream_floor_ratio", benchreport.Hundredths, func(f cdcFigures) float64 { return f.cdcDrain.EventsPerSecond / f.floor.oneTransaction }},
		{"stream_floor_to_poll_ratio", benchreport.Hundredths, func(f cdcFigures) float64 { return f.floor.oneTransaction / f.pollDrain.EventsPerSecond }},
		{"cdc_stream_floor_one_row_tx_events_per_s", benchreport.Tenths, func(f cdcFigures) float64 { return f.floor.oneRowTransactions }},
		{"cdc_bench_poll_wal_bytes_per_event", benchreport.Tenths, func(f cdcFigures) float64 { return f.pollDrain.Cost.WALBytes }},
		{"cdc_wal_bytes_per_event", benchreport.Tenths, func(f cdcFigures) float64 { return f.cdcDrain.Cost.WALBytes }},
		{"cdc_bench_poll_latency_p50_ms", benchreport.Tenths, func(f cdcFigures) float64 { return f.pollLatency.P50 }},
		{"cdc_bench_poll_latency_p99_ms", benchreport.Tenths, func(f cdcFigures) float64 { return f.pollLatency.P99 }},
		{"cdc_latency_p50_ms", benchreport.Tenths, func(f cdcFigures) float64 { return f.cdcLatency.P50 }},
		{"cdc_latency_p99_ms", benchreport.Tenths, func(f cdcFigures) float64 { return f.cdcLatency.P99 }},
		{"cdc_latency_rate_per_s", benchreport.Tenths, func(f cdcFigures) float64 { return f.cdcLatency.AchievedRate }},
		{"cdc_bench_load_avg_1m", benchreport.Hundredths, func(f cdcFigures) float64 { return f.loadAvg }},
	}
	for _, fig := range figures {
		s := make(benchreport.Samples, len(all))
		for i, f := range all {
			s[i] = fig.value(f)
		}
		s.AddTo(report, fig.key, fig.round)
	}
	benchreport.Samples{walRetainedBytes}.AddTo(report, "cdc_wal_retained_bytes_after_60s_outage", benchreport.Tenths)
	return report
}
