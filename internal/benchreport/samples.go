package benchreport

import (
	"math"
	"slices"
)

// Samples are one figure's values over the repetitions of a benchmark. The report keeps
// the median, which one disturbed repetition cannot move, and the spread beside it.
type Samples []float64

// Median is the middle value, or the mean of the two middle ones; 0 for none.
func (s Samples) Median() float64 {
	if len(s) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(s))
	mid := len(sorted) / 2
	if len(sorted)%2 == 0 {
		return (sorted[mid-1] + sorted[mid]) / 2
	}
	return sorted[mid]
}

// AddTo sets key to the rounded median in report, and key_min and key_max to the
// rounded extremes.
func (s Samples) AddTo(report map[string]any, key string, round func(float64) float64) {
	if len(s) == 0 {
		return
	}
	report[key] = round(s.Median())
	report[key+"_min"] = round(slices.Min(s))
	report[key+"_max"] = round(slices.Max(s))
}

// Tenths, Hundredths and Round4 round f to one, two or four decimals for the report;
// four for per-event figures well below one (commits per event).
func Tenths(f float64) float64     { return math.Round(f*10) / 10 }
func Hundredths(f float64) float64 { return math.Round(f*100) / 100 }
func Round4(f float64) float64     { return math.Round(f*1e4) / 1e4 }
