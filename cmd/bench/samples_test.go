package main

import (
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSamplesAddToReportsMedianAndSpread(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    samples
		want map[string]any
	}{
		{"none", nil, map[string]any{}},
		{"one", samples{3}, map[string]any{"x": 3.0, "x_min": 3.0, "x_max": 3.0}},
		{"odd", samples{9, 1, 4}, map[string]any{"x": 4.0, "x_min": 1.0, "x_max": 9.0}},
		{"even", samples{4, 1, 9, 2}, map[string]any{"x": 3.0, "x_min": 1.0, "x_max": 9.0}},
		{"rounded", samples{1.26, 1.24}, map[string]any{"x": 1.3, "x_min": 1.2, "x_max": 1.3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]any{}
			tt.s.addTo(got, "x", tenths)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("addTo(%v) (-want +got):\n%s", tt.s, diff)
			}
		})
	}
}

func TestParseRelayFlags(t *testing.T) {
	t.Parallel()
	c, err := parseRelayFlags([]string{"-backlog", "5000", "-reps", "1", "-explain"}, io.Discard)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if c.backlog != 5000 || c.reps != 1 || !c.diagnose.explain || c.latencyRate != 1000 {
		t.Errorf("got backlog %d, reps %d, explain %t, latency rate %d; want 5000, 1, true, 1000",
			c.backlog, c.reps, c.diagnose.explain, c.latencyRate)
	}
	if _, err := parseRelayFlags([]string{"-reps", "0"}, io.Discard); err == nil {
		t.Error("-reps 0: got no error, want one")
	}
}
