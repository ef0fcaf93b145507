package timeline

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/google/go-cmp/cmp"
)

// recorded reads the report of a real run of a scenario, timeline included, so that
// the pages are tested on what a run really writes without running one. The default
// run is the repository's sample (docs/sample, make chaos-sample), the one the README
// shows; testdata holds a run of every other scenario (go run ./cmd/chaos -scenario
// <name> on the native stack), their timelines thinned to about one sample a second
// (about 80 for the longest runs) to keep them small; chaos-dual-write.json is whole.
func recorded(t *testing.T, scenario string) *verdict.Report {
	t.Helper()
	path := filepath.Join("testdata", "chaos-"+scenario+".json")
	if scenario == "default" {
		path = samplePath
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read recorded report: %v", err)
	}
	var r verdict.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decode recorded report: %v", err)
	}
	if r.Timeline == nil || len(r.Timeline.Samples) < 10 {
		t.Fatalf("recorded report of %s has no timeline to draw", scenario)
	}
	return &r
}

// samplePath is the repository's sample run, the README's default page.
var samplePath = filepath.Join("..", "..", "..", "docs", "sample", "chaos-default.json")

var (
	sectionRE = regexp.MustCompile(`<section class="chart" id="chart-([a-z]+)">`)
	linkRE    = regexp.MustCompile(`href="#(chart-[a-z]+)"`)
	// A fault window is the only translucent fill gonum's SVG has in our charts.
	shadeRE = regexp.MustCompile(`style="fill:(#[0-9A-F]{6});fill-opacity:`)
)

func TestPageOfARecordedRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scenario   string
		wantCharts []string
		// lostChart is where the "lost" row links.
		lostChart string
	}{
		{"default", []string{"payments", "pending", "publishes", "topic", "decisions", "undecided", "duplicates"}, "chart-undecided"},
		{"dual-write", []string{"payments", "pending", "publishes", "topic", "decisions", "undecided", "duplicates", "lost"}, "chart-undecided"},
	}
	for _, tt := range tests {
		t.Run(tt.scenario, func(t *testing.T) {
			t.Parallel()
			r := recorded(t, tt.scenario)
			b, err := renderPage(r)
			if err != nil {
				t.Fatalf("Page: %v", err)
			}
			page := string(b)

			var got []string
			for _, m := range sectionRE.FindAllStringSubmatch(page, -1) {
				got = append(got, m[1])
			}
			if diff := cmp.Diff(tt.wantCharts, got); diff != "" {
				t.Errorf("charts (-want +got):\n%s", diff)
			}
			if n := strings.Count(page, "<svg"); n != len(tt.wantCharts) {
				t.Errorf("%d inline SVGs, want one per chart (%d)", n, len(tt.wantCharts))
			}
			// Every verdict row links to a chart of the page.
			links := linkRE.FindAllStringSubmatch(page, -1)
			if len(links) != len(r.Checks) {
				t.Errorf("%d links to charts, want one per verdict row (%d)", len(links), len(r.Checks))
			}
			for _, l := range links {
				if !strings.Contains(page, `id="`+l[1]+`"`) {
					t.Errorf("a verdict row links to #%s, which the page does not have", l[1])
				}
			}
			for _, c := range r.Checks {
				if c.Name == "lost (no event or no decision)" || strings.HasPrefix(c.Name, "lost:") {
					if want := `<td>` + c.Name + `</td>`; !strings.Contains(page, want) {
						t.Errorf("no row %q", c.Name)
					}
					if chart := "chart-" + chartOf(c); chart != tt.lostChart {
						t.Errorf("row %q links to %s, want %s", c.Name, chart, tt.lostChart)
					}
				}
			}
			// Every chart shades every window, in one colour per kind.
			shades := shadeRE.FindAllStringSubmatch(page, -1)
			if want := len(r.FaultWindows) * len(tt.wantCharts); len(shades) != want {
				t.Errorf("%d shaded windows, want %d (%d windows in each of %d charts)", len(shades), want, len(r.FaultWindows), len(tt.wantCharts))
			}
			colours := map[string]bool{}
			for _, m := range shades {
				colours[m[1]] = true
			}
			if len(colours) != len(kindsOf(r)) {
				t.Errorf("windows shaded in %d colours, want one per kind of fault (%d)", len(colours), len(kindsOf(r)))
			}
			assertSelfContained(t, page)
		})
	}
}

// assertSelfContained fails if the page could fetch anything: it must open from disk
// on a machine without network.
func assertSelfContained(t *testing.T, page string) {
	t.Helper()
	for _, bad := range []string{"<script", "<link", "src=", "@import", "url("} {
		if strings.Contains(page, bad) {
			t.Errorf("page contains %q: it must need nothing but itself", bad)
		}
	}
	for _, u := range regexp.MustCompile(`https?://[^"' )]+`).FindAllString(page, -1) {
		if !strings.HasPrefix(u, "http://www.w3.org/") { // SVG's namespaces, never fetched
			t.Errorf("page refers to %s", u)
		}
	}
}

func TestIndexPutsTheOutboxBesideTheDualWrite(t *testing.T) {
	t.Parallel()
	outbox, dual := recorded(t, "default"), recorded(t, "dual-write")
	b, err := renderIndex([]*verdict.Report{outbox, dual})
	if err != nil {
		t.Fatalf("Index: %v", err)
	}
	page := string(b)
	for _, id := range []string{"lesson-pending", "lesson-topic", "lesson-decisions", "lesson-undecided", "card-default", "card-dual-write"} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("index has no #%s", id)
		}
	}
	// Four rows of two charts, and one chart per card.
	if n := strings.Count(page, "<svg"); n != 4*2+2 {
		t.Errorf("%d SVGs, want 10", n)
	}
	// The same time axis: the runs' set-ups took different times, their faults begin
	// at the same place.
	a, d := fromDisruption(outbox).FaultWindows[0].StartS, fromDisruption(dual).FaultWindows[0].StartS
	if math.Abs(a-d) > 0.5 {
		t.Errorf("first fault window at %.1f s in the outbox's charts, %.1f s in the dual write's: want the same place", a, d)
	}
	// The same axes: a row's two charts have the same value axis.
	lessons, err := lesson(outbox, dual)
	if err != nil {
		t.Fatalf("lesson: %v", err)
	}
	top := regexp.MustCompile(`>([0-9]+)</text>`)
	for _, row := range lessons {
		left, right := top.FindAllStringSubmatch(string(row.Left), -1), top.FindAllStringSubmatch(string(row.Right), -1)
		if diff := cmp.Diff(left, right); diff != "" {
			t.Errorf("row %s: the two charts' tick labels differ, so their axes do (-outbox +dual write):\n%s", row.ID, diff)
		}
	}
	assertSelfContained(t, page)

	// Without the dual write there is no lesson to draw, and no error.
	b, err = renderIndex([]*verdict.Report{outbox})
	if err != nil {
		t.Fatalf("Index of one report: %v", err)
	}
	if strings.Contains(string(b), `id="lesson`) {
		t.Errorf("index of the default run alone shows the lesson")
	}
}

func TestChartOf(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, want string }{
		{"lost (no event or no decision)", chartUndecided},
		{"lost: the anti-pattern loses events", chartUndecided},
		{"drain_seconds", chartPending},
		{"copies injected by the harness (consumer dedup exercised)", chartDuplicates},
		{"api accepted every payment", chartPayments},
		{"API SIGKILLed and restarted by the harness", chartPublishes},
		{"events held back by proxy_down windows (topic)", chartTopic},
		{"record key is the payment id", chartTopic},
	}
	for _, tt := range tests {
		if got := chartOf(verdict.Check{Name: tt.name}); got != tt.want {
			t.Errorf("chartOf(%q) = %s, want %s", tt.name, got, tt.want)
		}
	}
}
