package timeline

import (
	"regexp"
	"strings"
	"testing"

	"gonum.org/v1/plot"

	"github.com/dscourse/payments-outbox/internal/chaos"
)

// chartSectionRE takes a chart's section apart: its id and its caption.
var chartSectionRE = regexp.MustCompile(`<section class="chart" id="chart-([a-z]+)">\s*<h3>[^<]*</h3>\s*<p>([^<]*)</p>`)

// Every scenario's page, drawn from its recorded run: captions that do not describe
// faults the run did not apply, and whole numbers on the axes, but for a rate too small
// for them.
func TestPagesOfEveryScenario(t *testing.T) {
	t.Parallel()
	for _, scenario := range chaos.ScenarioNames() {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			if _, ok := scenarioReadings[scenario]; !ok {
				t.Errorf("no readings for scenario %s in scenarioReadings: its charts would be captioned for faults it may not apply", scenario)
			}
			r := recorded(t, scenario)
			b, err := renderPage(r)
			if err != nil {
				t.Fatalf("Page: %v", err)
			}
			sections := chartSectionRE.FindAllStringSubmatch(string(b), -1)
			if len(sections) != len(charts(r)) {
				t.Fatalf("%d chart sections parsed, want %d", len(sections), len(charts(r)))
			}
			for _, s := range sections {
				id, caption := s[1], strings.ToLower(s[2])
				if len(r.FaultWindows) == 0 {
					for _, word := range []string{"shaded", "window", "kafka fails", "kafka is unreachable"} {
						if strings.Contains(caption, word) {
							t.Errorf("chart %s: caption mentions %q, but the run had no fault window: %s", id, word, s[2])
						}
					}
				}
			}
			// Whole numbers on the axes: time, counts, and rates but for a range too
			// small for them.
			for _, c := range charts(fromDisruption(r)) {
				p, err := newPlot(c, r, axes{EndS: endOf(r)})
				if err != nil {
					t.Fatalf("chart %s: %v", c.ID, err)
				}
				for _, ax := range []struct {
					name  string
					axis  plot.Axis
					whole bool
				}{
					{"time", p.X, true},
					{"value", p.Y, c.Count || p.Y.Max-p.Y.Min >= 3},
				} {
					for _, tick := range ax.axis.Tick.Marker.Ticks(ax.axis.Min, ax.axis.Max) {
						if ax.whole && strings.Contains(tick.Label, ".") {
							t.Errorf("chart %s: %s axis (%g to %g) ticked %q, want whole numbers", c.ID, ax.name, ax.axis.Min, ax.axis.Max, tick.Label)
							break
						}
					}
				}
			}
		})
	}
}
