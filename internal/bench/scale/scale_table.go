package scale

// The scale benchmark's measurements beside a table full of history: latency and
// claims, then retention by the cleaner and by dropping partitions (scale.go says what
// each figure is).

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/measure"

	"github.com/dscourse/payments-outbox/internal/benchreport"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// history measures everything that depends on n published rows in the table, on a
// database of its own.
func (b scaleBench) history(ctx context.Context, n int) error {
	pool, drop, err := b.MigratedPool(ctx, "bench_scale_history", migrations.Payments, 0)
	if err != nil {
		return err
	}
	defer drop()
	dbURL := pool.Config().ConnString()
	defer b.dropSlotOf(ctx, dbURL) // a slot left by a failed measurement would keep the database
	suffix := "_history_" + strconv.Itoa(n)
	put := func(key string, v float64) { b.report[key+suffix] = v }

	start := time.Now()
	if err := benchenv.FillHistory(ctx, pool, n, b.cfg.days); err != nil {
		return err
	}
	put("scale_history_fill_s", benchreport.Tenths(time.Since(start).Seconds()))
	fmt.Fprintf(b.stdout, "history %d: filled in %.0f s\n", n, time.Since(start).Seconds())

	if err := b.latencies(ctx, dbURL, suffix); err != nil {
		return err
	}
	b.dropSlotOf(ctx, dbURL) // the slot would hold the cleanup's WAL

	start = time.Now()
	if err := createPartitionedCopy(ctx, pool, b.cfg.days); err != nil {
		return err
	}
	put("scale_partitioned_copy_s", benchreport.Tenths(time.Since(start).Seconds()))
	return b.retention(ctx, pool, suffix)
}

// latencies measures, for both relays beside the history, commit-to-consumed latency
// and (for the polling relay) its claim statements' time.
func (b scaleBench) latencies(ctx context.Context, dbURL, suffix string) error {
	rb := b.cfg.Bench(b.Env)
	var pollP50, pollP99, claimP50, claimP99, cdcP50, cdcP99, load benchreport.Samples
	poll := keepHistory{Relay: b.Poll}
	for rep := 1; rep <= b.cfg.Reps; rep++ {
		claims := &claimTimer{}
		r, err := latencyTraced(ctx, rb, poll, dbURL, claims)
		if err != nil {
			return fmt.Errorf("polling relay's latency: %w", err)
		}
		c50, c99, nClaims := claims.percentiles()
		pollP50, pollP99 = append(pollP50, r.P50), append(pollP99, r.P99)
		claimP50, claimP99 = append(claimP50, c50), append(claimP99, c99)
		load = append(load, benchenv.LoadAverage())
		fmt.Fprintf(b.stdout, "  repetition %d, polling relay: p50 %.1f ms, p99 %.1f ms; claim p50 %.2f ms, p99 %.2f ms (%d claims); load %.2f\n",
			rep, r.P50, r.P99, c50, c99, nClaims, load[len(load)-1])
	}
	cdc := keepHistory{Relay: b.CDC, prepare: b.CDC.EnsureSlot}
	for rep := 1; rep <= b.cfg.Reps; rep++ {
		r, err := latencyTraced(ctx, rb, cdc, dbURL, nil)
		if err != nil {
			return fmt.Errorf("CDC relay's latency: %w", err)
		}
		cdcP50, cdcP99 = append(cdcP50, r.P50), append(cdcP99, r.P99)
		load = append(load, benchenv.LoadAverage())
		fmt.Fprintf(b.stdout, "  repetition %d, CDC relay: p50 %.1f ms, p99 %.1f ms; load %.2f\n", rep, r.P50, r.P99, load[len(load)-1])
	}
	pollP50.AddTo(b.report, "scale_poll_latency_p50_ms"+suffix, benchreport.Tenths)
	pollP99.AddTo(b.report, "scale_poll_latency_p99_ms"+suffix, benchreport.Tenths)
	claimP50.AddTo(b.report, "scale_poll_claim_p50_ms"+suffix, benchreport.Hundredths)
	claimP99.AddTo(b.report, "scale_poll_claim_p99_ms"+suffix, benchreport.Hundredths)
	cdcP50.AddTo(b.report, "scale_cdc_latency_p50_ms"+suffix, benchreport.Tenths)
	cdcP99.AddTo(b.report, "scale_cdc_latency_p99_ms"+suffix, benchreport.Tenths)
	load.AddTo(b.report, "scale_latency_load_avg_1m"+suffix, benchreport.Hundredths)
	b.report["scale_bench_latency_rate_per_s"] = b.cfg.LatencyRate
	return nil
}

// retention removes the oldest day of history once per repetition, by the cleaner on
// the table and by dropping the day's partition of the partitioned copy, and records
// both rates and the sizes after the first cycle.
func (b scaleBench) retention(ctx context.Context, pool *pgxpool.Pool, suffix string) error {
	before, err := benchenv.OutboxSizes(ctx, pool)
	if err != nil {
		return err
	}
	partBefore, err := benchenv.OutboxSizes(ctx, pool, partitionedTable)
	if err != nil {
		return err
	}
	b.report["scale_table_bytes_before_cleanup"+suffix] = before.Table
	b.report["scale_indexes_bytes_before_cleanup"+suffix] = before.Indexes
	fmt.Fprintf(b.stdout, "  before cleanup: table %s + indexes %s; partitioned %s + %s\n",
		mib(before.Table), mib(before.Indexes), mib(partBefore.Table), mib(partBefore.Indexes))
	b.report["scale_partitioned_table_bytes_before_drop"+suffix] = partBefore.Table
	b.report["scale_partitioned_indexes_bytes_before_drop"+suffix] = partBefore.Indexes

	var cleanRate, cleanRows, cleanSecs, dropRate, dropRows, dropSecs, load benchreport.Samples
	today := time.Now().UTC().Truncate(24 * time.Hour)
	for rep := 1; rep <= b.cfg.Reps; rep++ {
		// The rows created before cutoff: the oldest day still in the table.
		cutoff := today.AddDate(0, 0, rep-b.cfg.days)
		cycle, err := runCleanerOnce(ctx, pool, time.Since(cutoff))
		if err != nil {
			return err
		}
		rows, took, err := dropDaysBefore(ctx, pool, cutoff)
		if err != nil {
			return err
		}
		load = append(load, benchenv.LoadAverage())
		cleanRate, cleanRows, cleanSecs = append(cleanRate, cycle.deleted/cycle.took.Seconds()), append(cleanRows, cycle.deleted), append(cleanSecs, cycle.took.Seconds())
		dropRate, dropRows, dropSecs = append(dropRate, float64(rows)/took.Seconds()), append(dropRows, float64(rows)), append(dropSecs, took.Seconds())
		fmt.Fprintf(b.stdout, "  cleanup %d: cleaner deleted %.0f rows in %.2f s (%.0f rows/s); partition drop %d rows in %.3f s; load %.2f\n",
			rep, cycle.deleted, cycle.took.Seconds(), cycle.deleted/cycle.took.Seconds(), rows, took.Seconds(), load[len(load)-1])
		if rep > 1 {
			continue
		}
		after, err := benchenv.OutboxSizes(ctx, pool)
		if err != nil {
			return err
		}
		partAfter, err := benchenv.OutboxSizes(ctx, pool, partitionedTable)
		if err != nil {
			return err
		}
		b.report["scale_table_bytes_after_cleanup"+suffix] = after.Table
		b.report["scale_indexes_bytes_after_cleanup"+suffix] = after.Indexes
		b.report["scale_partitioned_table_bytes_after_drop"+suffix] = partAfter.Table
		b.report["scale_partitioned_indexes_bytes_after_drop"+suffix] = partAfter.Indexes
		fmt.Fprintf(b.stdout, "  after one cycle: table %s + indexes %s; partitioned %s + %s\n",
			mib(after.Table), mib(after.Indexes), mib(partAfter.Table), mib(partAfter.Indexes))
	}
	cleanRate.AddTo(b.report, "scale_cleanup_rows_per_s"+suffix, benchreport.Tenths)
	cleanRows.AddTo(b.report, "scale_cleanup_rows_per_cycle"+suffix, benchreport.Tenths)
	cleanSecs.AddTo(b.report, "scale_cleanup_cycle_s"+suffix, benchreport.Hundredths)
	dropRate.AddTo(b.report, "scale_partition_drop_rows_per_s"+suffix, benchreport.Tenths)
	dropRows.AddTo(b.report, "scale_partition_drop_rows"+suffix, benchreport.Tenths)
	dropSecs.AddTo(b.report, "scale_partition_drop_s"+suffix, benchreport.Round4)
	load.AddTo(b.report, "scale_cleanup_load_avg_1m"+suffix, benchreport.Hundredths)
	b.report["scale_bench_history_days"] = b.cfg.days
	return nil
}

// latencyTraced measures one latency run of relay on a fresh topic, as
// measure.Bench.Latency does but without settling the server first, with tracer (nil
// for none) on the relay's pool.
func latencyTraced(ctx context.Context, b measure.Bench, relay measure.Relay, dbURL string, tracer *claimTimer) (measure.LatencyResult, error) {
	topic, dropTopic, err := b.CreateTopic(ctx, "bench.scale-latency")
	if err != nil {
		return measure.LatencyResult{}, err
	}
	defer dropTopic()
	s := measure.LatencySetup{DBURL: dbURL, Brokers: b.Brokers, Topic: topic, Rate: b.LatencyRate, Duration: b.LatencyDuration}
	if tracer != nil { // a nil *claimTimer in the interface would be a tracer that panics
		s.Tracer = tracer
	}
	return measure.MeasureLatency(ctx, relay, s)
}

func mib(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }
