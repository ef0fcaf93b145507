package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/mutants"
)

func TestSelectMutants(t *testing.T) {
	t.Parallel()
	all := []mutants.Mutant{{Name: "01-dual-write"}, {Name: "06-no-dedup"}, {Name: "09-new-event-id-per-attempt"}}
	names := func(ms []mutants.Mutant) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	tests := []struct {
		only    string
		want    []string
		wantErr string
	}{
		{only: "", want: []string{"01-dual-write", "06-no-dedup", "09-new-event-id-per-attempt"}},
		{only: "06", want: []string{"06-no-dedup"}},
		{only: "09, 01-dual-write", want: []string{"09-new-event-id-per-attempt", "01-dual-write"}},
		{only: "06,42", wantErr: `no mutant matches "42"`},
	}
	for _, tt := range tests {
		got, err := selectMutants(all, tt.only)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("selectMutants(%q): got error %v, want %q", tt.only, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("selectMutants(%q): %v", tt.only, err)
			continue
		}
		if d := cmp.Diff(tt.want, names(got)); d != "" {
			t.Errorf("selectMutants(%q) (-want +got):\n%s", tt.only, d)
		}
	}
}
