package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
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

func TestConsumerDBRowsAreOffForAConsumerThatBypassesTheProxy(t *testing.T) {
	t.Parallel()
	report := &verdict.Report{Evidence: &verdict.Evidence{LoadEndS: 30}}
	proxied := &consumerDBFaults{SpikeLatency: time.Second, Kills: 2, Cuts: 2, Outage: 8 * time.Second,
		spikeRTT: time.Second, killed: []string{"a", "b"}, cutOpen: []int{1, 1}, cutSurvivors: []int{0, 0},
		outage: faults.Window{StartS: 18, EndS: 26}, decisionsBefore: 60, decisionsLate: 60}
	for _, row := range proxied.validity(report, nil) {
		if !row.OK || row.Off {
			t.Errorf("proxied consumer: row %q = %+v, want ok", row.Name, row)
		}
	}
	proxied.decisionsLate = 70 // decisions committed while the proxy was down
	if rows := proxied.validity(report, nil); rows[len(rows)-1].OK {
		t.Errorf("decisions committed during the outage: row %+v, want not ok", rows[len(rows)-1])
	}
	bypassing := &consumerDBFaults{Kills: 2, Cuts: 2, killed: []string{"a", "b"}, cutOpen: []int{1, 1}, cutSurvivors: []int{1, 1}, decisionsLate: 70}
	rows := bypassing.validity(report, nil)
	if !rows[0].OK || rows[0].Off {
		t.Errorf("terminations row of a bypassing consumer: %+v, want judged and ok", rows[0])
	}
	for _, row := range rows[1:] {
		if !row.Off || !strings.Contains(row.Got, "does not reach its database through the DATABASE_URL") {
			t.Errorf("bypassing consumer: row %q = %+v, want off, saying why", row.Name, row)
		}
	}
}
