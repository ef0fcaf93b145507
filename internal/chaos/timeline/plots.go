package timeline

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// faultColors shade the fault windows, one colour per kind, light enough for the lines
// to stay readable over them; the page's legend uses the same colours. NRGBA, not
// RGBA: the alpha is applied to the colour, which RGBA expects done already.
var faultColors = map[faults.Kind]color.NRGBA{
	faults.DropAcks:     {R: 0xff, G: 0xbb, B: 0x78, A: 0x80},
	faults.DropRequests: {R: 0xff, G: 0x98, B: 0x96, A: 0x80},
	faults.ProxyDown:    {R: 0xc5, G: 0xb0, B: 0xd5, A: 0x80},
	faults.SlowAcks:     {R: 0xae, G: 0xc7, B: 0xe8, A: 0x80},
}

// otherFault shades a kind of window added to the harness after this file.
var otherFault = color.NRGBA{R: 0xc7, G: 0xc7, B: 0xc7, A: 0x80}

func faultColor(kind faults.Kind) color.NRGBA {
	if c, ok := faultColors[kind]; ok {
		return c
	}
	return otherFault
}

// axes are the ranges every chart of a comparison shares, so that a student can read
// one run against another by position alone.
type axes struct {
	// EndS is the right edge of the time axis, in seconds from the start of the run.
	EndS float64
	// YMax, when positive, fixes the top of the value axis.
	YMax float64
}

// newPlot draws one chart of a run: its fault windows shaded behind its lines, and a
// dashed vertical line at each disruption (a kill, a restart).
func newPlot(c chart, r *verdict.Report, ax axes) (*plot.Plot, error) {
	// No title: the page prints it above the chart, where the verdict rows link to.
	p := plot.New()
	p.X.Label.Text = "seconds since the disruption began"
	p.Y.Label.Text = c.YLabel
	p.X.Min, p.X.Max = 0, ax.EndS
	p.Y.Min, p.Y.Max = 0, ax.YMax
	if ax.YMax <= 0 {
		p.Y.Max = niceTop(maxValue(c), len(c.Lines) > 1)
	}
	p.X.Tick.Marker = integerTicks{}
	p.Y.Tick.Marker = rateTicks{}
	if c.Count {
		p.Y.Tick.Marker = integerTicks{}
	}
	p.Add(plotter.NewGrid())
	p.Add(&windows{windows: r.FaultWindows})
	p.Add(&marks{disruptions: r.Disruptions})
	for _, l := range c.Lines {
		if len(l.Points) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(l.Points))
		for i, pt := range l.Points {
			xys[i] = plotter.XY{X: pt.T, Y: pt.V}
		}
		ln, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		ln.Color = l.Color
		ln.Width = vg.Points(1.5)
		p.Add(ln)
		if len(c.Lines) > 1 {
			p.Legend.Add(l.Name, ln)
		}
	}
	p.Legend.Top = true
	return p, nil
}

// maxValue is the largest value of a chart's lines.
func maxValue(c chart) float64 {
	m := 0.0
	for _, l := range c.Lines {
		for _, pt := range l.Points {
			m = max(m, pt.V)
		}
	}
	return m
}

// niceTop leaves some room above the highest value, more when a legend must fit in
// the top corner, and a visible axis when every value is zero (a chart of nothing is a
// finding too: no duplicates, nothing lost).
func niceTop(m float64, legend bool) float64 {
	if m <= 0 {
		return 1
	}
	if legend {
		return m * 1.4
	}
	return m * 1.1
}

// endOf is the time axis a run needs: to its last sample, or its last fault window.
func endOf(r *verdict.Report) float64 {
	end := 1.0
	if r.Timeline != nil && len(r.Timeline.Samples) > 0 {
		end = max(end, r.Timeline.Samples[len(r.Timeline.Samples)-1].AtS)
	}
	for _, w := range r.FaultWindows {
		end = max(end, w.EndS)
	}
	return end
}

// windows is a plotter that shades the fault windows across the whole height of the
// data area, behind the lines (it is added first).
type windows struct{ windows []faults.Window }

func (w *windows) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	for _, win := range w.windows {
		x0, x1 := trX(max(win.StartS, p.X.Min)), trX(min(win.EndS, p.X.Max))
		if x1 <= x0 {
			continue
		}
		c.FillPolygon(faultColor(win.Kind), []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
	}
}

// marks is a plotter that draws a dashed vertical line at each disruption.
type marks struct{ disruptions []verdict.Disruption }

func (m *marks) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	style := draw.LineStyle{Color: black, Width: vg.Points(0.75), Dashes: []vg.Length{vg.Points(3), vg.Points(2)}}
	for _, d := range m.disruptions {
		if d.AtSeconds < p.X.Min || d.AtSeconds > p.X.Max {
			continue
		}
		x := trX(d.AtSeconds)
		c.StrokeLine2(style, x, c.Min.Y, x, c.Max.Y)
	}
}

// fromDisruption returns a copy of r whose times count from its first sample, taken
// as the disruption starts, instead of from the start of the run: the set-up before it
// (fresh databases, services, the warm-up) takes a few seconds more or less each time,
// and two runs drawn side by side must have their faults at the same place.
func fromDisruption(r *verdict.Report) *verdict.Report {
	if r.Timeline == nil || len(r.Timeline.Samples) == 0 {
		return r
	}
	shift := r.Timeline.Samples[0].AtS
	out := *r
	tl := *r.Timeline
	tl.Samples = make([]verdict.Sample, len(r.Timeline.Samples))
	for i, s := range r.Timeline.Samples {
		s.AtS -= shift
		tl.Samples[i] = s
	}
	out.Timeline = &tl
	out.FaultWindows = make([]faults.Window, len(r.FaultWindows))
	for i, w := range r.FaultWindows {
		w.StartS, w.EndS = w.StartS-shift, w.EndS-shift
		out.FaultWindows[i] = w
	}
	out.Disruptions = make([]verdict.Disruption, len(r.Disruptions))
	for i, d := range r.Disruptions {
		d.AtSeconds -= shift
		out.Disruptions[i] = d
	}
	return &out
}
