package timeline

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

// integerTicks marks an axis at whole numbers, 1, 2 or 5 times a power of ten apart,
// about five of them, labelled without decimals: seconds, and counts of rows, events
// and payments, are whole, and an axis that reads "25.00" payments suggests a
// precision that is not there.
type integerTicks struct{}

// Ticks implements plot.Ticker.
func (integerTicks) Ticks(lo, hi float64) []plot.Tick {
	step := niceStep((hi - lo) / 5)
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 0, 64)})
	}
	return ticks
}

// rateTicks marks a rate's axis at whole numbers too, unless its range is too small
// for them (a trickle of failures a second), where gonum's default ticks, with their
// decimals, say more.
type rateTicks struct{}

// Ticks implements plot.Ticker.
func (rateTicks) Ticks(lo, hi float64) []plot.Tick {
	if hi-lo < 3 {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	return integerTicks{}.Ticks(lo, hi)
}

// niceStep is the smallest of 1, 2, 5, 10, 20, 50 ... at least raw.
func niceStep(raw float64) float64 {
	if raw <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}
