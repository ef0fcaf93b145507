package network

import (
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// The rows of the faults that only a run can show are judged from what the harness
// recorded; these tests give them that record directly.

func TestShortRetentionRowTellsAServiceWithoutCleanupApart(t *testing.T) {
	t.Parallel()
	ours := &harness.Run{Group: "g", RelayMode: verdict.RelayModePoll}
	students := &harness.Run{Group: "g"}
	target := &harness.Run{}
	tests := []struct {
		name            string
		rn              *harness.Run
		table           string
		atStart, least  int
		wantOK, wantOff bool
	}{
		{"ours, cleanup ran", ours, "outbox_published", 12, 0, true, false},
		{"ours, no cleanup", ours, "outbox_published", 12, 12, false, false},
		{"a student's, no cleanup", students, "outbox_events", 12, 12, true, true},
		{"a student's, cleanup ran", students, "outbox_events", 12, 3, true, false},
		{"a target", target, "", -1, -1, true, true},
	}
	for _, tt := range tests {
		s := &shortRetention{Retention: 5 * time.Second, Interval: time.Second, table: tt.table, atStart: tt.atStart, least: tt.least}
		row := s.check(tt.rn, time.Minute)
		if row.Kind != verdict.Validity || row.OK != tt.wantOK || row.Off != tt.wantOff {
			t.Errorf("%s: %+v, want ok %t, off %t", tt.name, row, tt.wantOK, tt.wantOff)
		}
	}
}
