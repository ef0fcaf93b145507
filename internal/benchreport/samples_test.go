package benchreport

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSamplesAddToReportsMedianAndSpread(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    Samples
		want map[string]any
	}{
		{"none", nil, map[string]any{}},
		{"one", Samples{3}, map[string]any{"x": 3.0, "x_min": 3.0, "x_max": 3.0}},
		{"odd", Samples{9, 1, 4}, map[string]any{"x": 4.0, "x_min": 1.0, "x_max": 9.0}},
		{"even", Samples{4, 1, 9, 2}, map[string]any{"x": 3.0, "x_min": 1.0, "x_max": 9.0}},
		{"rounded", Samples{1.26, 1.24}, map[string]any{"x": 1.3, "x_min": 1.2, "x_max": 1.3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]any{}
			tt.s.AddTo(got, "x", Tenths)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("AddTo(%v) (-want +got):\n%s", tt.s, diff)
			}
		})
	}
}
