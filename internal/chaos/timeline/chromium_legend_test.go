package timeline

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/chaos"
)

// legendFaults are the faults each scenario's recorded run applied (recorded): the
// kinds of its fault windows, then its disruptions in the order they first happened,
// each once, as a student should find them named in the legend.
var legendFaults = map[string][]string{
	"default":            {"acks lost", "requests dropped", "proxy down"},
	"dual-write":         {"acks lost", "requests dropped", "proxy down"},
	"kafka-down":         {"proxy down"},
	"relay-crash":        {"acks lost", "SIGKILL api", "api restarted"},
	"consumer-crash":     {"SIGKILL consumer", "consumer crashed (self-crash knob, reference service only)"},
	"consumer-rebalance": {"consumer added", "consumer stopped (SIGTERM)", "consumer killed (SIGKILL)", "consumer frozen (SIGSTOP) with records arriving", "consumer resumed (SIGCONT)"},
	"replica-pause":      {"acks slowed", "replica paused (SIGSTOP)", "replica resumed (SIGCONT), the other frozen", "both replicas running"},
	"hostile-records":    {"hostile records begin", "hostile records end"},
	"clock-skew":         {"topic refuses the relay's timestamps", "topic accepts the relay's timestamps again"},
	"poison":             {"topic refuses the largest valid events", "topic takes large events again", "dead letters replayed through POST /admin/dlq/{event_id}/replay"},
	"dlq-replay":         {"topic refuses every record as too large", "topic takes records again"},
	"pg-faults":          {"PostgreSQL latency spike", "PostgreSQL connections cut", "PostgreSQL unreachable for the API", "PostgreSQL reachable again"},
	"commit-refused":     {"PostgreSQL session terminated before its COMMIT"},
	"idempotency-storm":  {"SIGKILL api", "api restarted"},
	"consumer-db":        {"consumer's PostgreSQL latency spike", "consumer's session terminated in a write transaction", "consumer's PostgreSQL connections cut", "consumer's PostgreSQL unreachable", "consumer's PostgreSQL reachable again"},
	"long-transaction":   {"snapshot held", "snapshot released"},
	"broker-failover":    {"SIGKILL broker 1", "broker 1 started", "broker 1 back in sync", "SIGKILL broker 3", "broker 3 started", "broker 3 back in sync"},
	"partition-offline":  {"proxy down", "relay cut off from broker 1"},
	"rolling-restart":    {"SIGTERM broker 1", "broker 1 started", "broker 1 back in sync", "SIGTERM broker 2", "broker 2 started", "broker 2 back in sync", "SIGTERM broker 3", "broker 3 started", "broker 3 back in sync"},
	"pg-failover":        {"SIGKILL PostgreSQL primary", "standby promoted", "old primary rebuilt as its standby", "failed back to the old primary"},
	"pg-failover-async":  {"standby stopped receiving WAL", "SIGKILL PostgreSQL primary", "standby promoted", "old primary rebuilt as its standby", "failed back to the old primary"},
	"db-restart":         {"PostgreSQL restart begins", "PostgreSQL restart done"},
}

// shownLegend is the legend as the browser laid it out.
type shownLegend struct {
	// Faults are the names in bold, in page order.
	Faults []string
	// Swatches counts the colours of shaded windows; NoWindows is whether the legend
	// says that nothing is shaded.
	Swatches  int
	NoWindows bool
}

const readLegend = `(() => {
  const legend = document.querySelector("#timeline ~ .legend");
  if (!legend) return {Faults: [], Swatches: 0, NoWindows: false};
  return {
    Faults: [...legend.querySelectorAll(".fault")].map(e => e.textContent),
    Swatches: legend.querySelectorAll(".swatch").length,
    NoWindows: legend.querySelector(".no-windows") !== null,
  };
})()`

// Each scenario's page, opened in headless Chromium, has a legend that names each
// fault its run applied, once, and says that nothing is shaded when the run had no
// fault window instead of pointing at shading that is not there.
func TestChromiumLegendNamesEachFault(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	dir := t.TempDir()
	for _, scenario := range chaos.ScenarioNames() {
		t.Run(scenario, func(t *testing.T) {
			want, ok := legendFaults[scenario]
			if !ok {
				t.Fatalf("no faults listed for scenario %s: record a run of it in testdata and list them in legendFaults", scenario)
			}
			r := recorded(t, scenario)
			path, err := WritePage(dir, r)
			if err != nil {
				t.Fatalf("WritePage: %v", err)
			}
			b.open(t, path)
			got, err := chromedp.Run(b.ctx, chromedp.Evaluate[shownLegend](readLegend))
			if err != nil {
				t.Fatalf("read the legend: %v", err)
			}
			if diff := cmp.Diff(want, got.Faults); diff != "" {
				t.Errorf("faults named in the legend (-want +got):\n%s", diff)
			}
			kinds := len(kindsOf(r))
			if got.Swatches != kinds {
				t.Errorf("%d colours of shading in the legend, want %d (one per kind of window)", got.Swatches, kinds)
			}
			if got.NoWindows != (kinds == 0) {
				t.Errorf("legend says nothing is shaded: %v, with %d kinds of window", got.NoWindows, kinds)
			}
			if errs := b.consoleErrors(); len(errs) > 0 {
				t.Errorf("console errors: %v", errs)
			}
		})
	}
}
