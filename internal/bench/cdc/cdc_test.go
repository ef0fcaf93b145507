package cdc

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/bench/measure"
	"github.com/dscourse/payments-outbox/migrations"

	"github.com/google/go-cmp/cmp"
)

func TestCDCReportTakesMediansOfRepetitionsAndTheOutageOnce(t *testing.T) {
	t.Parallel()
	all := []cdcFigures{
		{pollDrain: measure.DrainResult{EventsPerSecond: 100}, cdcDrain: measure.DrainResult{EventsPerSecond: 50}, cdcLatency: measure.LatencyResult{P99: 30}, loadAvg: 1},
		{pollDrain: measure.DrainResult{EventsPerSecond: 300}, cdcDrain: measure.DrainResult{EventsPerSecond: 150}, cdcLatency: measure.LatencyResult{P99: 10}, loadAvg: 5},
		{pollDrain: measure.DrainResult{EventsPerSecond: 200}, cdcDrain: measure.DrainResult{EventsPerSecond: 80}, cdcLatency: measure.LatencyResult{P99: 20}, loadAvg: 3},
	}
	got := cdcReport(all, 60_355_232, cdcBenchConfig{Flags: measure.Flags{Backlog: 1000, Reps: len(all)}, outage: 60 * time.Second})

	want := map[string]any{
		"cdc_bench_reps":     3,
		"cdc_bench_outage_s": 60.0,
		// The repetitions' figures: median, and the spread over the three.
		"cdc_bench_poll_drain_events_per_s":     200.0,
		"cdc_bench_poll_drain_events_per_s_min": 100.0,
		"cdc_bench_poll_drain_events_per_s_max": 300.0,
		"cdc_drain_events_per_s":                80.0,
		"cdc_drain_events_per_s_min":            50.0,
		"cdc_drain_events_per_s_max":            150.0,
		"cdc_to_poll_drain_ratio":               0.5, // each repetition's own ratio: 0.5, 0.5, 0.4
		"cdc_to_poll_drain_ratio_min":           0.4,
		"cdc_to_poll_drain_ratio_max":           0.5,
		"cdc_latency_p99_ms":                    20.0,
		"cdc_latency_p99_ms_min":                10.0,
		"cdc_latency_p99_ms_max":                30.0,
		"cdc_bench_load_avg_1m":                 3.0,
		"cdc_bench_load_avg_1m_min":             1.0,
		"cdc_bench_load_avg_1m_max":             5.0,
		// The outage, measured once: no spread.
		"cdc_wal_retained_bytes_after_60s_outage":     60_355_232.0,
		"cdc_wal_retained_bytes_after_60s_outage_min": 60_355_232.0,
		"cdc_wal_retained_bytes_after_60s_outage_max": 60_355_232.0,
	}
	picked := map[string]any{}
	for k := range want {
		if v, ok := got[k]; ok {
			picked[k] = v
		}
	}
	if diff := cmp.Diff(want, picked); diff != "" {
		t.Errorf("cdcReport (-want +got):\n%s", diff)
	}
}

// The stream floor counts every insert of a backlog on the real stack, in both shapes:
// one transaction, and one event per transaction, where a reader that stopped at the
// first commit would count one.
func TestStreamFloorReadsEveryInsertOfTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env, err := benchenv.OpenPostgres(ctx, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	dbURL, drop, err := env.MigratedDatabase(ctx, "bench_floor_test", migrations.Payments)
	if err != nil {
		t.Fatal(err)
	}
	defer drop()
	const backlog = 500
	for _, shape := range []struct {
		name string
		fill backlogFill
	}{{"one transaction", benchenv.FillBacklog}, {"one event per transaction", benchenv.FillBacklogOneEventPerTransaction}} {
		conn, slot, err := openFloorSlot(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.New(ctx, dbURL)
		if err != nil {
			t.Fatal(err)
		}
		err = shape.fill(ctx, pool, backlog)
		pool.Close()
		if err != nil {
			t.Fatal(err)
		}
		readCtx, cancel := context.WithTimeout(ctx, time.Minute)
		got, err := readInserts(readCtx, conn, slot, backlog)
		cancel()
		_ = conn.Close(ctx)
		if err != nil {
			t.Fatalf("%s: %v", shape.name, err)
		}
		if got != backlog {
			t.Errorf("%s: read %d inserts, want %d", shape.name, got, backlog)
		}
	}
}
