package replicapause

import (
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

func TestIdleClaimsFailOnlyAClaimIdlePastTheLease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name              string
		longest           time.Duration
		pastLease         map[string]time.Duration
		wantValid, wantOK bool
	}{
		{"a claim ended by the lease", harness.RelayLease, nil, true, true},
		{"no claim held long", time.Second, nil, false, true},
		{"a claim idle past the lease", 16 * time.Second, map[string]time.Duration{"pid 7 since 12:00:00": 16 * time.Second}, true, false},
	}
	for _, tt := range tests {
		w := &idleClaims{longest: tt.longest, pastLease: tt.pastLease}
		rows := w.checks()
		if len(rows) != 2 || rows[0].Kind != verdict.Validity || rows[1].Kind != verdict.SLO {
			t.Fatalf("%s: rows %+v, want one validity row and one SLO row", tt.name, rows)
		}
		if rows[0].OK != tt.wantValid || rows[1].OK != tt.wantOK {
			t.Errorf("%s: validity ok %t, SLO ok %t (%q); want %t, %t", tt.name, rows[0].OK, rows[1].OK, rows[1].Got, tt.wantValid, tt.wantOK)
		}
	}
}
