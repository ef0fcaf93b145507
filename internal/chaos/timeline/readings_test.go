package timeline

import (
	"regexp"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos"
)

var (
	// chartSectionRE takes a chart's section apart: its id, its caption, its SVG.
	chartSectionRE = regexp.MustCompile(`(?s)<section class="chart" id="chart-([a-z]+)">\s*<h3>[^<]*</h3>\s*<p>([^<]*)</p>(.*?)</section>`)
	// tickLabelRE is a number written by gonum as a tick label.
	tickLabelRE = regexp.MustCompile(`>(-?[0-9]+(?:\.[0-9]+)?)</text>`)
)

// Every scenario's page, drawn from its recorded run: captions that do not describe
// faults the run did not apply, and whole numbers on the axes of counts and of time.
func TestPagesOfEveryScenario(t *testing.T) {
	t.Parallel()
	for _, scenario := range chaos.ScenarioNames() {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			if _, ok := scenarioReadings[scenario]; !ok {
				t.Errorf("no readings for scenario %s in scenarioReadings: its charts would be captioned for faults it may not apply", scenario)
			}
			r := recorded(t, scenario)
			b, err := Page(r)
			if err != nil {
				t.Fatalf("Page: %v", err)
			}
			sections := chartSectionRE.FindAllStringSubmatch(string(b), -1)
			if len(sections) != len(charts(r)) {
				t.Fatalf("%d chart sections parsed, want %d", len(sections), len(charts(r)))
			}
			counts := map[string]bool{}
			for _, c := range charts(r) {
				counts[c.ID] = c.Count
			}
			for _, s := range sections {
				id, caption, svg := s[1], strings.ToLower(s[2]), s[3]
				if len(r.FaultWindows) == 0 {
					for _, word := range []string{"shaded", "window", "kafka fails", "kafka is unreachable"} {
						if strings.Contains(caption, word) {
							t.Errorf("chart %s: caption mentions %q, but the run had no fault window: %s", id, word, s[2])
						}
					}
				}
				if !counts[id] {
					continue
				}
				for _, m := range tickLabelRE.FindAllStringSubmatch(svg, -1) {
					if strings.Contains(m[1], ".") {
						t.Errorf("chart %s counts whole things, but has the tick label %s", id, m[1])
						break
					}
				}
			}
		})
	}
}
