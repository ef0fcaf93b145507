package verdict

import (
	"bytes"
	"strings"
	"testing"
)

// The verdict rules: FAIL whenever the service failed a check, whatever
// validity says; INVALID only when the service held and a fault did not bite; PASS only
// when everything held.
func TestVerdict(t *testing.T) {
	t.Parallel()
	validity := func(ok bool) Check { return Check{Kind: Validity, Name: "faults bit", OK: ok} }
	slo := func(ok bool) Check { return Check{Kind: SLO, Name: "lost", OK: ok} }
	contract := func(ok bool) Check { return Check{Kind: Contract, Name: "record key", OK: ok} }
	tests := []struct {
		name        string
		checks      []Check
		wantVerdict string
		wantValid   bool
		wantAdvice  []string // parts of the line under the table
	}{
		{
			name:        "all hold",
			checks:      []Check{validity(true), slo(true), contract(true)},
			wantVerdict: Pass, wantValid: true,
			wantAdvice: []string{"PASS"},
		},
		{
			name:        "an SLO fails",
			checks:      []Check{validity(true), slo(false), contract(true)},
			wantVerdict: Fail, wantValid: true,
			wantAdvice: []string{"FAIL", `"lost"`},
		},
		{
			name:        "a contract row fails",
			checks:      []Check{validity(true), slo(true), contract(false)},
			wantVerdict: Fail, wantValid: true,
			wantAdvice: []string{"FAIL", `"record key"`},
		},
		{
			name:        "an SLO fails and the faults did not bite: still FAIL, never INVALID",
			checks:      []Check{validity(false), slo(false), contract(true)},
			wantVerdict: Fail, wantValid: false,
			wantAdvice: []string{"FAIL", `"lost"`, `the faults also missed in "faults bit"`},
		},
		{
			name:        "faults did not bite but the service held: INVALID",
			checks:      []Check{validity(false), slo(true), contract(true)},
			wantVerdict: Invalid, wantValid: false,
			wantAdvice: []string{"INVALID", `"faults bit"`, "rerun"},
		},
		{
			name:        "a check that is off counts as held",
			checks:      []Check{validity(true), Check{Kind: SLO, Name: "dlq", Want: "0", Got: "off: no outbox_dlq", OK: true, Off: true}, slo(true)},
			wantVerdict: Pass, wantValid: true,
			wantAdvice: []string{"PASS"},
		},
		{
			name:        "a kind added later counts against the service",
			checks:      []Check{validity(true), {Kind: "evidence", Name: "new row", OK: false}},
			wantVerdict: Fail, wantValid: true,
			wantAdvice: []string{"FAIL", `"new row"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := Report{Checks: tt.checks}
			r.Judge()
			if got := r.Verdict(); got != tt.wantVerdict || r.Outcome != tt.wantVerdict {
				t.Errorf("verdict: got %s (outcome %s), want %s", got, r.Outcome, tt.wantVerdict)
			}
			if r.Valid != tt.wantValid {
				t.Errorf("valid: got %t, want %t", r.Valid, tt.wantValid)
			}
			if wantPass := tt.wantVerdict == Pass; r.Pass != wantPass {
				t.Errorf("pass: got %t, want %t", r.Pass, wantPass)
			}
			advice := r.Advice()
			for _, part := range tt.wantAdvice {
				if !strings.Contains(advice, part) {
					t.Errorf("advice %q: want it to contain %q", advice, part)
				}
			}
		})
	}
}

// The table shows a check that is off as off, and the advice under it.
func TestPrintTable(t *testing.T) {
	t.Parallel()
	r := Report{Scenario: "default", Stack: "native", Checks: []Check{
		Check{Kind: Validity, Name: "faults bit", Want: "> 0", Got: "3", OK: true},
		Check{Kind: SLO, Name: "lost (no event or no decision)", Want: "0", Got: "2"},
		Check{Kind: SLO, Name: "dlq", Want: "0", Got: "off: dead-letter check off: no outbox_dlq and no outbox_events table", OK: true, Off: true},
	}}
	r.Judge()
	var out bytes.Buffer
	r.PrintTable(&out)
	for _, want := range []string{
		`chaos scenario "default" on the native stack: FAIL`,
		"off: dead-letter check off: no outbox_dlq and no outbox_events table  off",
		`FAIL: the service lost, duplicated or mislabelled events, or broke the contract: fix it; see the rows "lost (no event or no decision)"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table:\n%s\nwant it to contain %q", out.String(), want)
		}
	}
}
