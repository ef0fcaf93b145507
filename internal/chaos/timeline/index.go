package timeline

import (
	"fmt"
	"html/template"
	"path/filepath"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// The size of the charts of the index: two of them side by side in the lesson, and
// one per scenario card.
const (
	lessonWidth  = 13 * vg.Centimeter
	lessonHeight = 5.5 * vg.Centimeter
	cardWidth    = 11 * vg.Centimeter
	cardHeight   = 5 * vg.Centimeter
)

// indexPath is where the index goes in dir.
func indexPath(dir string) string { return filepath.Join(dir, "index.html") }

// WriteIndex writes the index of a run of several scenarios to indexPath(dir) and
// returns the path. The lesson, the outbox against the dual write, is shown when both
// the default and the dual-write scenario are among reports.
func WriteIndex(dir string, reports []*verdict.Report) (string, error) {
	html, err := renderIndex(reports)
	if err != nil {
		return "", err
	}
	path := indexPath(dir)
	return path, writeFile(path, html)
}

type indexData struct {
	Outbox, DualWrite           *verdict.Report
	OutboxBadge, DualWriteBadge badge
	Legend                      legend
	Lesson                      []lessonRow
	Cards                       []cardData
}

type lessonRow struct {
	chart
	Left, Right template.HTML
}

type cardData struct {
	Report *verdict.Report
	Badge  badge
	SVG    template.HTML
}

// renderIndex renders the index of reports, in their order.
func renderIndex(reports []*verdict.Report) ([]byte, error) {
	var data indexData
	shifted := make([]*verdict.Report, len(reports))
	for i, r := range reports {
		shifted[i] = fromDisruption(r)
	}
	reports = shifted
	for _, r := range reports {
		switch r.Scenario {
		case "default":
			data.Outbox = r
		case "dual-write":
			data.DualWrite = r
		}
	}
	if data.Outbox != nil && data.DualWrite != nil {
		rows, err := lesson(data.Outbox, data.DualWrite)
		if err != nil {
			return nil, err
		}
		data.Lesson, data.Legend = rows, legendOf(data.Outbox, data.DualWrite)
		data.OutboxBadge, data.DualWriteBadge = badgeOf(data.Outbox), badgeOf(data.DualWrite)
	}
	for _, r := range reports {
		p, err := newPlot(undecidedChart(r), r, axes{EndS: endOf(r)})
		if err != nil {
			return nil, fmt.Errorf("card %s: %w", r.Scenario, err)
		}
		svgs, err := renderColumn([]*plot.Plot{p}, cardWidth, cardHeight)
		if err != nil {
			return nil, err
		}
		data.Cards = append(data.Cards, cardData{Report: r, Badge: badgeOf(r), SVG: svgs[0]})
	}
	return execute(indexTemplate, data)
}

// lesson draws the outbox's charts beside the dual write's, row by row on the same
// axes: the same time axis for all, the same value axis in a row, so that a student
// compares heights and not tick labels.
func lesson(outbox, dualWrite *verdict.Report) ([]lessonRow, error) {
	pick := func(r *verdict.Report, ids ...string) []chart {
		var picked []chart
		for _, id := range ids {
			for _, c := range charts(r) {
				if c.ID == id {
					picked = append(picked, c)
				}
			}
		}
		return picked
	}
	ids := []string{chartPending, chartTopic, chartDecisions, chartUndecided}
	left, right := pick(outbox, ids...), pick(dualWrite, ids...)
	ax := axes{EndS: max(endOf(outbox), endOf(dualWrite))}
	grid := make([][]*plot.Plot, len(left))
	for i := range left {
		row := ax
		row.YMax = niceTop(max(maxValue(left[i]), maxValue(right[i])), len(left[i].Lines) > 1)
		l, err := newPlot(left[i], outbox, row)
		if err != nil {
			return nil, err
		}
		r, err := newPlot(right[i], dualWrite, row)
		if err != nil {
			return nil, err
		}
		grid[i] = []*plot.Plot{l, r}
	}
	svgs, err := renderGrid(grid, lessonWidth, lessonHeight)
	if err != nil {
		return nil, err
	}
	rows := make([]lessonRow, len(left))
	for i := range left {
		rows[i] = lessonRow{chart: left[i], Left: svgs[i][0], Right: svgs[i][1]}
	}
	return rows, nil
}
