package consumer

// What the consumer benchmark prints and what it writes to reports/bench.json.

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/dscourse/payments-outbox/internal/antifraud"
	"github.com/dscourse/payments-outbox/internal/benchreport"
)

// printRepetition prints one repetition's figures as they are measured.
func printRepetition(w io.Writer, rep int, f figures) {
	fmt.Fprintf(w, "repetition %d (load average %.2f)\n", rep, f.loadAvg)
	fmt.Fprintf(w, "  relay drain (%dx%d)                %8.0f events/s\n", relaySettings.Workers, relaySettings.BatchSize, f.relay)
	fmt.Fprintf(w, "  consumer, one instance             %8.0f events/s      %.2f of the relay's\n", f.one, f.one/f.relay)
	fmt.Fprintf(w, "  consumer, three instances, 1 group %8.0f events/s      %.2f of the relay's, %.2f of one instance's\n", f.three, f.three/f.relay, f.three/f.one)
	fmt.Fprintf(w, "  consumer, each event twice         %8.0f deliveries/s\n", f.twice)
}

// consumerReport turns the repetitions into the report's fields: for each figure the
// median under its key, the extremes under key_min and key_max; ratios are taken within
// each repetition.
func consumerReport(all []figures, cfg consumerBenchConfig) map[string]any {
	report := map[string]any{
		"consumer_bench_events":      cfg.events,
		"consumer_bench_reps":        cfg.reps,
		"consumer_bench_measured_at": time.Now().UTC().Format(time.RFC3339),
		"consumer_bench_note": "medians of consumer_bench_reps repetitions (_min, _max: the spread); events (once) or deliveries (twice) per second, " +
			"from the consumers' start in a fresh group (group join included) until every record is in the database; fresh topic of 3 partitions and fresh database each drain; " +
			"max poll " + strconv.Itoa(antifraud.DefaultMaxPollRecords) + " split by user into 2 transactions; relay = internal/outbox/poll with 4 workers of 1000, draining as many events in the same repetition; ratios are per repetition",
	}
	figures := []struct {
		key   string
		round func(float64) float64
		value func(figures) float64
	}{
		{"consumer_events_per_s", benchreport.Tenths, func(f figures) float64 { return f.one }},
		{"consumer_3_instances_events_per_s", benchreport.Tenths, func(f figures) float64 { return f.three }},
		{"consumer_dup_events_per_s", benchreport.Tenths, func(f figures) float64 { return f.twice }},
		{"consumer_bench_relay_drain_events_per_s", benchreport.Tenths, func(f figures) float64 { return f.relay }},
		{"consumer_to_relay_ratio", benchreport.Hundredths, func(f figures) float64 { return f.one / f.relay }},
		{"consumer_3_instances_to_relay_ratio", benchreport.Hundredths, func(f figures) float64 { return f.three / f.relay }},
		{"consumer_3_instances_to_one_ratio", benchreport.Hundredths, func(f figures) float64 { return f.three / f.one }},
		{"consumer_bench_load_avg_1m", benchreport.Hundredths, func(f figures) float64 { return f.loadAvg }},
	}
	for _, fig := range figures {
		s := make(benchreport.Samples, len(all))
		for i, f := range all {
			s[i] = fig.value(f)
		}
		s.AddTo(report, fig.key, fig.round)
	}
	return report
}

// printSummary prints the medians and the goal: one instance at least half the relay.
func printSummary(w io.Writer, r map[string]any) {
	fmt.Fprintf(w, "medians: consumer %v events/s, three instances %v, each event twice %v deliveries/s; relay %v events/s\n",
		r["consumer_events_per_s"], r["consumer_3_instances_events_per_s"], r["consumer_dup_events_per_s"], r["consumer_bench_relay_drain_events_per_s"])
	verdict := "met"
	if ratio, _ := r["consumer_to_relay_ratio"].(float64); ratio < 0.5 {
		verdict = "NOT met"
	}
	fmt.Fprintf(w, "consumer / relay %v (%v–%v), goal 0.5 %s; three instances / relay %v; three / one %v\n",
		r["consumer_to_relay_ratio"], r["consumer_to_relay_ratio_min"], r["consumer_to_relay_ratio_max"], verdict,
		r["consumer_3_instances_to_relay_ratio"], r["consumer_3_instances_to_one_ratio"])
}
