package timeline

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestIntegerTicks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		lo, hi float64
		want   []string
	}{
		{0, 1, []string{"0", "1"}},
		{0, 3.3, []string{"0", "1", "2", "3"}},
		{0, 46.2, []string{"0", "10", "20", "30", "40"}},
		{0, 140, []string{"0", "50", "100"}},
		{0, 1200, []string{"0", "500", "1000"}},
	}
	for _, tt := range tests {
		var got []string
		for _, tick := range (integerTicks{}).Ticks(tt.lo, tt.hi) {
			got = append(got, tick.Label)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Ticks(%g, %g) (-want +got):\n%s", tt.lo, tt.hi, diff)
		}
	}
}

// A rate is ticked at whole numbers like a count, but for a range too small for them.
func TestRateTicks(t *testing.T) {
	t.Parallel()
	var got []string
	for _, tick := range (rateTicks{}).Ticks(0, 46.2) {
		got = append(got, tick.Label)
	}
	if diff := cmp.Diff([]string{"0", "10", "20", "30", "40"}, got); diff != "" {
		t.Errorf("Ticks(0, 46.2) (-want +got):\n%s", diff)
	}
	labelled := 0
	for _, tick := range (rateTicks{}).Ticks(0, 1.4) {
		if tick.Label != "" {
			labelled++
		}
	}
	if labelled < 2 {
		t.Errorf("Ticks(0, 1.4) has %d labelled ticks: a small rate needs its decimals", labelled)
	}
}
