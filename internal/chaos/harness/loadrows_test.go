package harness

import (
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// The load's SLO rows fail on what the clients saw, and only then.
func TestLoadRowsFailOnWhatTheClientsSaw(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		row     verdict.Check
		wantOK  bool
		wantOff bool
	}{
		{"no 5xx", serverErrorsCheck(&verdict.Report{}), true, false},
		{"a 500", serverErrorsCheck(&verdict.Report{ServerErrors: load.ServerErrors{Count: 1, First: []string{"500 POST /payments"}}}), false, false},
		{"no same-key request", sameKeyCheck(&verdict.Report{}), true, true},
		{"same-key requests, one payment each", sameKeyCheck(&verdict.Report{SameKey: load.SameKeyStats{Keys: 5}}), true, false},
		{"a split key", sameKeyCheck(&verdict.Report{SameKey: load.SameKeyStats{Keys: 5, Split: 1, FirstSplit: "run-3"}}), false, false},
	} {
		if tt.row.OK != tt.wantOK || tt.row.Off != tt.wantOff {
			t.Errorf("%s: row %q got %q ok=%v off=%v, want ok=%v off=%v", tt.name, tt.row.Name, tt.row.Got, tt.row.OK, tt.row.Off, tt.wantOK, tt.wantOff)
		}
	}
}
