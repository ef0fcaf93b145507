package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSelectBenchmarks(t *testing.T) {
	t.Parallel()
	all := benchmarks()
	tests := []struct {
		args            []string
		selected, flags []string
		wantErr         bool
	}{
		{args: []string{"relay"}, selected: []string{"relay"}},
		{args: []string{"relay", "-reps", "1"}, selected: []string{"relay"}, flags: []string{"-reps", "1"}},
		{args: []string{"relay", "api"}, selected: []string{"relay", "api"}},
		{args: []string{"all"}, selected: []string{"api", "cdc", "consumer", "ladder", "relay", "scale"}},
		{args: nil, wantErr: true},
		{args: []string{"-reps", "1"}, wantErr: true},
		{args: []string{"relay", "api", "-reps", "1"}, wantErr: true},
		{args: []string{"all", "-reps", "1"}, wantErr: true},
		{args: []string{"all", "relay"}, wantErr: true},
		{args: []string{"relay", "nope"}, wantErr: true},
	}
	for _, tt := range tests {
		selected, flags, err := selectBenchmarks(all, tt.args)
		if (err != nil) != tt.wantErr {
			t.Errorf("selectBenchmarks(%q): error %v, want error: %t", tt.args, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(tt.selected, selected, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("selectBenchmarks(%q) benchmarks (-want +got):\n%s", tt.args, diff)
		}
		if diff := cmp.Diff(tt.flags, flags, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("selectBenchmarks(%q) flags (-want +got):\n%s", tt.args, diff)
		}
	}
}
