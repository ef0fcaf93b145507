package main

import "slices"

// samples are one figure's values over the repetitions of a benchmark. The report keeps
// the median, which one disturbed repetition cannot move, and the spread beside it.
type samples []float64

func (s samples) median() float64 {
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

// addTo sets key to the rounded median in report, and key_min and key_max to the
// rounded extremes.
func (s samples) addTo(report map[string]any, key string, round func(float64) float64) {
	if len(s) == 0 {
		return
	}
	report[key] = round(s.median())
	report[key+"_min"] = round(slices.Min(s))
	report[key+"_max"] = round(slices.Max(s))
}
