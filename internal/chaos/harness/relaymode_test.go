package harness

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// make chaos-all's closing table: one line per scenario, the polling relay's column
// first, "not run" where a mode has no report.
func TestPrintRelayModes(t *testing.T) {
	t.Parallel()
	pass := &verdict.Report{DrainSeconds: 4, EventsInTopic: 101}
	fail := &verdict.Report{DrainSeconds: 51, EventsInTopic: 99, Checks: []verdict.Check{{Kind: "slo", Name: "lost", OK: false}}}
	reports := map[string]map[string]*verdict.Report{
		verdict.RelayModePoll: {"default": pass, "kafka-down": pass},
		verdict.RelayModeCDC:  {"default": fail},
	}
	var out bytes.Buffer
	PrintRelayModes(&out, []string{"default", "kafka-down"}, reports)

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := map[string][]string{
		"default":    {"PASS", "FAIL", "4.0 / 51.0", "101 / 99"},
		"kafka-down": {"PASS", "not run", "4.0 / not run"},
	}
	for scenario, cells := range want {
		var line string
		for _, l := range lines {
			if strings.HasPrefix(l, scenario+" ") {
				line = l
			}
		}
		fields := strings.Join(strings.Fields(line), " ")
		if !strings.Contains(fields, strings.Join(cells[:2], " ")) {
			t.Errorf("row %q = %q, want verdicts %v in that order", scenario, line, cells[:2])
		}
		for _, c := range cells[2:] {
			if !strings.Contains(fields, c) {
				t.Errorf("row %q = %q, want %q", scenario, line, c)
			}
		}
	}
}
