package timeline

import (
	"bytes"
	"fmt"
	"html/template"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"
	"gonum.org/v1/plot/vg/vgsvg"
)

// renderGrid draws a grid of plots, each w by h, as one inline SVG per cell, with
// their data areas aligned: the same left edge in a column, so that one second is at
// the same place in every chart of the page, whatever the width of its value labels.
//
// Each chart is its own SVG so that the page can link to it (#chart-<id>) and so
// that a reader can save one. gonum's plot.Align does the aligning, for a grid drawn
// on one canvas; it is asked for the layout on a recorder (a canvas that draws
// nothing), and each plot is then drawn on its own SVG canvas with the padding it was
// given there.
func renderGrid(grid [][]*plot.Plot, w, h vg.Length) ([][]template.HTML, error) {
	rows := len(grid)
	if rows == 0 {
		return nil, nil
	}
	cols := len(grid[0])
	tiles := draw.Tiles{Rows: rows, Cols: cols}
	whole := draw.Canvas{Canvas: &recorder.Canvas{}, Rectangle: vg.Rectangle{Max: vg.Point{X: w * vg.Length(cols), Y: h * vg.Length(rows)}}}
	aligned := plot.Align(grid, tiles, whole)

	out := make([][]template.HTML, rows)
	for j, row := range grid {
		out[j] = make([]template.HTML, cols)
		for i, p := range row {
			tile := tiles.At(whole, i, j).Rectangle
			cell := aligned[j][i].Rectangle
			svg := vgsvg.New(w, h)
			dc := draw.Canvas{Canvas: svg, Rectangle: vg.Rectangle{
				Min: vg.Point{X: cell.Min.X - tile.Min.X, Y: cell.Min.Y - tile.Min.Y},
				Max: vg.Point{X: w - (tile.Max.X - cell.Max.X), Y: h - (tile.Max.Y - cell.Max.Y)},
			}}
			p.Draw(dc)
			var buf bytes.Buffer
			if _, err := svg.WriteTo(&buf); err != nil {
				return nil, fmt.Errorf("render chart %q: %w", p.Title.Text, err)
			}
			out[j][i] = inline(buf.Bytes())
		}
	}
	return out, nil
}

// inline drops what comes before the <svg> element (the XML declaration and a
// comment), which has no place inside an HTML page. The SVG is gonum's own output,
// trusted as markup.
func inline(svg []byte) template.HTML {
	if i := bytes.Index(svg, []byte("<svg")); i >= 0 {
		svg = svg[i:]
	}
	return template.HTML(svg)
}

// renderColumn draws plots stacked in one column; see renderGrid.
func renderColumn(plots []*plot.Plot, w, h vg.Length) ([]template.HTML, error) {
	grid := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		grid[i] = []*plot.Plot{p}
	}
	cells, err := renderGrid(grid, w, h)
	if err != nil {
		return nil, err
	}
	out := make([]template.HTML, len(cells))
	for i, row := range cells {
		out[i] = row[0]
	}
	return out, nil
}
