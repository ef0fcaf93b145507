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
