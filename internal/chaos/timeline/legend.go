package timeline

import (
	"fmt"
	"html/template"
	"image/color"
	"slices"
	"strings"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// A legend names every fault a run applied, each once: the kinds of window shaded
// behind the charts, and the disruptions drawn as dashed lines with the seconds they
// happened at. A run with no window says so, rather than pointing at shading that is
// not there.
type legend struct {
	Windows []windowEntry
	Marks   []markEntry
}

// A windowEntry is one kind of fault window: its colour, its name, what it does, and
// how many windows of it the run had (0 in the legend of several runs, where a total
// would read as one run's).
type windowEntry struct {
	Name, Meaning string
	Count         int
	CSS           template.CSS
}

// A markEntry is one kind of disruption (verdict.Disruption.What) and when it happened.
type markEntry struct {
	What string
	At   string
}

// faultNames and faultMeanings say in a few words what each kind of window does to
// the relay's connection to Kafka.
var (
	faultNames = map[faults.Kind]string{
		faults.DropAcks:     "acks lost",
		faults.DropRequests: "requests dropped",
		faults.ProxyDown:    "proxy down",
		faults.SlowAcks:     "acks slowed",
	}
	faultMeanings = map[faults.Kind]string{
		faults.DropAcks:     "the broker writes, its answers are dropped",
		faults.DropRequests: "nothing reaches the broker",
		faults.ProxyDown:    "connections refused",
		faults.SlowAcks:     "every answer of the broker arrives late",
	}
)

// faultName is how the page names a kind of window; a kind added to the harness after
// this file is named by its identifier.
func faultName(kind faults.Kind) string {
	if name, ok := faultNames[kind]; ok {
		return name
	}
	return string(kind)
}

// legendOf builds the legend of one run, or of several drawn side by side.
func legendOf(reports ...*verdict.Report) legend {
	var lg legend
	for _, kind := range kindsOf(reports...) {
		n := 0
		if len(reports) == 1 {
			for _, w := range reports[0].FaultWindows {
				if w.Kind == kind {
					n++
				}
			}
		}
		lg.Windows = append(lg.Windows, windowEntry{Name: faultName(kind), Meaning: faultMeanings[kind], Count: n, CSS: cssColor(faultColor(kind))})
	}
	// Disruptions in the order they first happened, each named once with all its times.
	var whats []string
	at := map[string][]string{}
	for _, r := range reports {
		for _, d := range r.Disruptions {
			if _, seen := at[d.What]; !seen {
				whats = append(whats, d.What)
			}
			at[d.What] = append(at[d.What], fmt.Sprintf("%.0f", d.AtSeconds))
		}
	}
	for _, what := range whats {
		lg.Marks = append(lg.Marks, markEntry{What: what, At: strings.Join(at[what], ", ")})
	}
	return lg
}

// cssColor writes a colour for a style attribute, alpha included.
func cssColor(c color.NRGBA) template.CSS {
	return template.CSS(fmt.Sprintf("rgba(%d,%d,%d,%.2f)", c.R, c.G, c.B, float64(c.A)/255))
}

// kindsOf lists the kinds of fault a set of runs used, in a stable order, for the
// legend.
func kindsOf(reports ...*verdict.Report) []faults.Kind {
	var kinds []faults.Kind
	for _, r := range reports {
		for _, w := range r.FaultWindows {
			if !slices.Contains(kinds, w.Kind) {
				kinds = append(kinds, w.Kind)
			}
		}
	}
	slices.Sort(kinds)
	return kinds
}
