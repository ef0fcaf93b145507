package pgfault

import (
	"strings"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

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
