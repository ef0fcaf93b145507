package relay

// What the relay benchmark prints and what it writes to reports/bench.json.

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/measure"

	"github.com/dscourse/payments-outbox/internal/benchreport"

	"github.com/dscourse/payments-outbox/internal/outbox/poll"
)

// printRepetition prints one repetition's figures as they are measured.
func printRepetition(w io.Writer, rep int, f relayFigures, relayCfg poll.Config, rate int) {
	drain := func(name string, d measure.DrainResult) {
		fmt.Fprintf(w, "  %-28s %8.0f events/s  %6.0f WAL bytes, %.2f WAL records, %.3f full-page images, %.4f WAL flushes, %.4f commits per event\n",
			name, d.EventsPerSecond, d.Cost.WALBytes, d.Cost.WALRecords, d.Cost.WALFPI, d.Cost.WALSyncs, d.Cost.Commits)
	}
	latency := func(name string, l measure.LatencyResult) {
		fmt.Fprintf(w, "  %-28s p50 %6.1f ms, p99 %6.1f ms, max %6.1f ms (%d events, achieved %.0f/s)\n",
			name, l.P50, l.P99, l.Max, l.Events, l.AchievedRate)
		fmt.Fprintf(w, "  %-28s commit to record stamped (the claim): p50 %6.1f ms, p99 %6.1f ms\n", "", l.StampedP50, l.StampedP99)
	}
	fmt.Fprintf(w, "repetition %d (load average %.2f)\n", rep, f.loadAvg)
	drain(fmt.Sprintf("drain, our relay (%dx%d)", relayCfg.Workers, relayCfg.BatchSize), f.relay)
	drain("drain, floor", f.floor)
	drain("drain, same-schema minimal", f.sameSchema)
	latency(fmt.Sprintf("latency at %d/s, our relay", rate), f.relayLatency)
	f.relayLatency.WokenBy.Print(w)
	latency(fmt.Sprintf("latency at %d/s, floor", rate), f.floorLatency)
	latency(fmt.Sprintf("latency at %d/s, another replica's commits", rate), f.otherReplicaLatency)
	if f.relayUnderLoad.Events > 0 {
		latency(fmt.Sprintf("API load, %.0f tx/s: our relay", f.relayUnderLoad.apiTPS), f.relayUnderLoad.LatencyResult)
		f.relayUnderLoad.WokenBy.Print(w)
		latency(fmt.Sprintf("API load, %.0f tx/s: floor", f.floorUnderLoad.apiTPS), f.floorUnderLoad.LatencyResult)
	}
	if f.cluster != nil {
		drain("drain, our relay, cluster", f.cluster.drain)
		latency(fmt.Sprintf("latency at %d/s, ours, cluster", rate), f.cluster.latency)
	}
}

// relayReport turns the repetitions into the report's fields: for each figure the
// median under its key, the extremes under key_min and key_max. Ratios are taken
// within each repetition, whose relays ran minutes apart under the same neighbours,
// and then summarised like any figure.
func relayReport(all []relayFigures, cfg relayBenchConfig, relayCfg poll.Config) map[string]any {
	pick := func(f func(relayFigures) float64) benchreport.Samples {
		s := make(benchreport.Samples, len(all))
		for i, r := range all {
			s[i] = f(r)
		}
		return s
	}
	report := map[string]any{
		"relay_workers":           relayCfg.Workers,
		"relay_batch_size":        relayCfg.BatchSize,
		"floor_relay_batch_size":  minimalRelayBatchSize,
		"relay_bench_backlog":     cfg.Backlog,
		"relay_bench_reps":        cfg.Reps,
		"relay_bench_measured_at": time.Now().UTC().Format(time.RFC3339),
		"relay_bench_note": "medians of relay_bench_reps repetitions (_min, _max: the spread); " +
			"floor = one-loop minimal relay on a minimal table of its own (bigserial id, key, jsonb payload, published; one partial index); " +
			"minimal_relay = the same loop on our outbox_events table (same-schema comparison); " +
			"latency = commit to consumed; latency_stamped = commit to the record's timestamp, set by the relay's producer after the claim (the wait for a claim), in whole ms; WAL bytes (pg_current_wal_lsn), WAL records and flushes (pg_stat_wal) are server-wide, " +
			"commits (pg_stat_database.xact_commit) are the benchmark database's, all measured around the drain only; " +
			"ratios are per repetition",
	}
	figures := []struct {
		key   string
		round func(float64) float64
		value func(relayFigures) float64
	}{
		{"relay_drain_events_per_s", benchreport.Tenths, func(f relayFigures) float64 { return f.relay.EventsPerSecond }},
		{"floor_relay_events_per_s", benchreport.Tenths, func(f relayFigures) float64 { return f.floor.EventsPerSecond }},
		{"minimal_relay_events_per_s", benchreport.Tenths, func(f relayFigures) float64 { return f.sameSchema.EventsPerSecond }},
		{"relay_to_floor_ratio", benchreport.Hundredths, func(f relayFigures) float64 { return f.relay.EventsPerSecond / f.floor.EventsPerSecond }},
		{"relay_to_minimal_ratio", benchreport.Hundredths, func(f relayFigures) float64 { return f.relay.EventsPerSecond / f.sameSchema.EventsPerSecond }},

		{"relay_latency_p50_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.relayLatency.P50 }},
		{"relay_latency_p99_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.relayLatency.P99 }},
		{"relay_latency_rate_per_s", benchreport.Tenths, func(f relayFigures) float64 { return f.relayLatency.AchievedRate }},
		{"floor_latency_p50_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.floorLatency.P50 }},
		{"floor_latency_p99_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.floorLatency.P99 }},
		{"relay_latency_stamped_p50_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.relayLatency.StampedP50 }},
		{"relay_latency_stamped_p99_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.relayLatency.StampedP99 }},
		{"floor_latency_stamped_p50_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.floorLatency.StampedP50 }},
		{"floor_latency_stamped_p99_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.floorLatency.StampedP99 }},
		{"relay_latency_other_replica_p50_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.otherReplicaLatency.P50 }},
		{"relay_latency_other_replica_p99_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.otherReplicaLatency.P99 }},
		{"relay_latency_p99_to_floor_ratio", benchreport.Hundredths, func(f relayFigures) float64 { return f.relayLatency.P99 / f.floorLatency.P99 }},

		{"relay_wal_bytes_per_event", benchreport.Tenths, func(f relayFigures) float64 { return f.relay.Cost.WALBytes }},
		{"floor_wal_bytes_per_event", benchreport.Tenths, func(f relayFigures) float64 { return f.floor.Cost.WALBytes }},
		{"minimal_relay_wal_bytes_per_event", benchreport.Tenths, func(f relayFigures) float64 { return f.sameSchema.Cost.WALBytes }},
		{"relay_wal_records_per_event", benchreport.Hundredths, func(f relayFigures) float64 { return f.relay.Cost.WALRecords }},
		{"floor_wal_records_per_event", benchreport.Hundredths, func(f relayFigures) float64 { return f.floor.Cost.WALRecords }},
		{"minimal_relay_wal_records_per_event", benchreport.Hundredths, func(f relayFigures) float64 { return f.sameSchema.Cost.WALRecords }},
		{"relay_wal_fpi_per_event", benchreport.Round4, func(f relayFigures) float64 { return f.relay.Cost.WALFPI }},
		{"floor_wal_fpi_per_event", benchreport.Round4, func(f relayFigures) float64 { return f.floor.Cost.WALFPI }},
		{"minimal_relay_wal_fpi_per_event", benchreport.Round4, func(f relayFigures) float64 { return f.sameSchema.Cost.WALFPI }},
		{"relay_wal_flushes_per_event", benchreport.Round4, func(f relayFigures) float64 { return f.relay.Cost.WALSyncs }},
		{"floor_wal_flushes_per_event", benchreport.Round4, func(f relayFigures) float64 { return f.floor.Cost.WALSyncs }},
		{"relay_commits_per_event", benchreport.Round4, func(f relayFigures) float64 { return f.relay.Cost.Commits }},
		{"floor_commits_per_event", benchreport.Round4, func(f relayFigures) float64 { return f.floor.Cost.Commits }},
		{"minimal_relay_commits_per_event", benchreport.Round4, func(f relayFigures) float64 { return f.sameSchema.Cost.Commits }},

		// What woke our relay's workers at the latency measurement's rate, and how long
		// after the commit the claim came (measure.WakeFigures).
		{"relay_latency_woken_by_busy_share", benchreport.Hundredths, func(f relayFigures) float64 { return f.relayLatency.WokenBy["busy"].Share }},
		{"relay_latency_woken_by_nudge_share", benchreport.Hundredths, func(f relayFigures) float64 { return f.relayLatency.WokenBy["nudge"].Share }},
		{"relay_latency_woken_by_idle_poll_share", benchreport.Hundredths, func(f relayFigures) float64 { return f.relayLatency.WokenBy["idle_poll"].Share }},
		{"relay_latency_woken_by_poll_share", benchreport.Hundredths, func(f relayFigures) float64 { return f.relayLatency.WokenBy["poll"].Share }},
		{"relay_latency_commit_to_claim_mean_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.relayLatency.WokenBy.MeanWaitMs() }},

		// Neighbours on a shared machine lower every figure (less so the ratios).
		{"relay_bench_load_avg_1m", benchreport.Hundredths, func(f relayFigures) float64 { return f.loadAvg }},
	}
	for _, f := range figures {
		pick(f.value).AddTo(report, f.key, f.round)
	}
	if cfg.apiLoadClients > 0 {
		addAPILoadFigures(report, all, cfg.apiLoadClients)
	}
	addClusterFigures(report, all)
	return report
}

// printSummary prints the headline medians beside the relay's goals against the floor.
func printSummary(w io.Writer, report map[string]any) {
	fmt.Fprintf(w, "medians of %v: drain %v events/s, floor %v (ratio %v, goal >= 0.8), same-schema minimal %v (ratio %v)\n",
		report["relay_bench_reps"], report["relay_drain_events_per_s"], report["floor_relay_events_per_s"],
		report["relay_to_floor_ratio"], report["minimal_relay_events_per_s"], report["relay_to_minimal_ratio"])
	fmt.Fprintf(w, "  latency p99 %v ms, floor %v ms (ratio %v, goal <= 1.5 and <= 20 ms)\n",
		report["relay_latency_p99_ms"], report["floor_latency_p99_ms"], report["relay_latency_p99_to_floor_ratio"])
	if v, ok := report["relay_latency_p99_under_api_load_ms"]; ok {
		fmt.Fprintf(w, "  beside the API's load (%v tx/s): latency p99 %v ms, floor %v ms (ratio %v, goal <= 1.5 and <= 20 ms)\n",
			report["api_load_tx_per_s"], v, report["floor_latency_p99_under_api_load_ms"], report["relay_latency_p99_to_floor_ratio_under_api_load"])
	}
	fmt.Fprintf(w, "  WAL bytes per event %v, floor %v; commits per event %v, floor %v\n",
		report["relay_wal_bytes_per_event"], report["floor_wal_bytes_per_event"],
		report["relay_commits_per_event"], report["floor_commits_per_event"])
	if v, ok := report["relay_drain_cluster_events_per_s"]; ok {
		fmt.Fprintf(w, "  three-node cluster (RF 3, acks=all): drain %v events/s [%v, %v], latency p99 %v ms [%v, %v]\n",
			v, report["relay_drain_cluster_events_per_s_min"], report["relay_drain_cluster_events_per_s_max"],
			report["relay_latency_cluster_p99_ms"], report["relay_latency_cluster_p99_ms_min"], report["relay_latency_cluster_p99_ms_max"])
	}
}

// addAPILoadFigures adds the latencies beside the API's load (apiload.go) to report.
func addAPILoadFigures(report map[string]any, all []relayFigures, clients int) {
	report["relay_bench_api_load_clients"] = clients
	figures := []struct {
		key   string
		round func(float64) float64
		value func(relayFigures) float64
	}{
		{"relay_latency_p50_under_api_load_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.relayUnderLoad.P50 }},
		{"relay_latency_p99_under_api_load_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.relayUnderLoad.P99 }},
		{"relay_latency_stamped_p99_under_api_load_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.relayUnderLoad.StampedP99 }},
		{"floor_latency_p50_under_api_load_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.floorUnderLoad.P50 }},
		{"floor_latency_p99_under_api_load_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.floorUnderLoad.P99 }},
		{"floor_latency_stamped_p99_under_api_load_ms", benchreport.Tenths, func(f relayFigures) float64 { return f.floorUnderLoad.StampedP99 }},
		{"relay_latency_p99_to_floor_ratio_under_api_load", benchreport.Hundredths, func(f relayFigures) float64 { return f.relayUnderLoad.P99 / f.floorUnderLoad.P99 }},
		// The load's own rate, both measurements' mean: what the relays ran beside.
		{"api_load_tx_per_s", math.Round, func(f relayFigures) float64 { return (f.relayUnderLoad.apiTPS + f.floorUnderLoad.apiTPS) / 2 }},
	}
	for _, f := range figures {
		samples := make(benchreport.Samples, len(all))
		for i, r := range all {
			samples[i] = f.value(r)
		}
		samples.AddTo(report, f.key, f.round)
	}
}
