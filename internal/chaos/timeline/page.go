// Package timeline writes the HTML reports of the chaos harness: for each run,
// reports/chaos-<scenario>.html, its verdict table above its charts on one time axis;
// for a run of every scenario, reports/index.html, the scenarios side by side and the
// outbox against the dual write on the same axes.
//
// Every page is one self-contained file that opens from disk: the charts are SVG
// drawn by gonum.org/v1/plot and inlined, the style is inline, and nothing is fetched
// (no script, no font, no CDN). A page is built from a verdict.Report alone, so it can be
// rebuilt from a JSON report at any time (go run ./cmd/chaos html).
//
// reports/ is generated and not tracked; the repository keeps one run, the default
// scenario's, as docs/sample (make chaos-sample), with the README's screenshots.
package timeline

import (
	"bytes"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/dscourse/payments-outbox/internal/chaos"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// The size of one chart of a run's page: wide enough for a second to be a few
// pixels, short enough for the whole story to fit two screens.
const (
	chartWidth  = 22 * vg.Centimeter
	chartHeight = 6 * vg.Centimeter
)

// pagePath is where the page of a run goes in dir: beside its JSON report, with the
// same name (chaos-<scenario>.html, or chaos-<scenario>-cdc.html for the CDC relay).
func pagePath(dir string, r *verdict.Report) string {
	return filepath.Join(dir, r.FileStem()+".html")
}

// WritePage writes the page of one run to pagePath(dir, r) and returns the path.
func WritePage(dir string, r *verdict.Report) (string, error) {
	html, err := renderPage(r)
	if err != nil {
		return "", err
	}
	path := pagePath(dir, r)
	return path, writeFile(path, html)
}

// renderPage renders the page of one run.
func renderPage(r *verdict.Report) ([]byte, error) {
	r = fromDisruption(r)
	cs := charts(r)
	plots := make([]*plot.Plot, len(cs))
	for i, c := range cs {
		p, err := newPlot(c, r, axes{EndS: endOf(r)})
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", c.ID, err)
		}
		plots[i] = p
	}
	svgs, err := renderColumn(plots, chartWidth, chartHeight)
	if err != nil {
		return nil, err
	}
	data := pageData{Report: r, Badge: badgeOf(r), Advice: adviceOf(r), Legend: legendOf(r)}
	if sc, ok := chaos.Scenarios(false)[r.Scenario]; ok {
		data.Description = sc.Description
	}
	for i, c := range cs {
		data.Charts = append(data.Charts, chartData{chart: c, SVG: svgs[i]})
	}
	for _, c := range r.Checks {
		data.Rows = append(data.Rows, rowData{Check: c, Chart: chartOf(c)})
	}
	if r.Timeline == nil {
		data.Notes = append(data.Notes, "this report has no timeline: it was written by a harness that did not sample the run, so the charts are empty")
	}
	return execute(pageTemplate, data)
}

// isDualWrite tells the dual-write run by its timeline, the only one that counts
// losses as they happen.
func isDualWrite(r *verdict.Report) bool {
	return r.Timeline != nil && slices.ContainsFunc(r.Timeline.Samples, func(s verdict.Sample) bool { return s.DualWriteGivenUp >= 0 })
}

type pageData struct {
	Report *verdict.Report
	Badge  badge
	Advice string
	// Description is what the scenario breaks, as the harness describes it (the full
	// run's figures; -short shortens the windows).
	Description string
	Legend      legend
	Rows        []rowData
	Charts      []chartData
	Notes       []string
}

type rowData struct {
	verdict.Check
	Chart string
}

type chartData struct {
	chart
	SVG template.HTML
}

func execute(t *template.Template, data any) ([]byte, error) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("render page: %w", err)
	}
	return buf.Bytes(), nil
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create report directory: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
