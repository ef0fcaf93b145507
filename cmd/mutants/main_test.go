package main

import (
	"context"
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

// TestMutantsRunNativeOnly: each mutant is a patched build the harness starts itself,
// so STACK=compose is refused, after a first line that says which stack and why.
func TestMutantsRunNativeOnly(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	getenv := func(name string) string {
		if name == "STACK" {
			return "compose"
		}
		return ""
	}
	// Cancelled: were compose not refused, the run would stop at its first wait.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := run(ctx, []string{"-mutant", "06"}, getenv, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "native stack only") {
		t.Errorf("STACK=compose: got error %v, want one saying the mutants run on the native stack only", err)
	}
	if first, _, _ := strings.Cut(out.String(), "\n"); first != "stack: compose (STACK=compose)" {
		t.Errorf("first line %q, want %q", first, "stack: compose (STACK=compose)")
	}
}
