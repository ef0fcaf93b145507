package harness

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The windows of these tests: acks dropped 0-5 s, requests dropped 9-14 s, proxy down
// 18-23 s.
var testWindows = []faults.Window{
	{Kind: faults.DropAcks, StartS: 0, EndS: 5},
	{Kind: faults.DropRequests, StartS: 9, EndS: 14},
	{Kind: faults.ProxyDown, StartS: 18, EndS: 23},
}

func TestFaultChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		AcceptedS  map[string]float64
		FirstSeenS map[string]float64
		want       []string // Got of each row: drop_acks, drop_requests, proxy_down
		wantOK     []bool
	}{
		{
			name: "a relay behind the proxy: each burst waits for its window to end",
			// One payment per burst, accepted one second into each window.
			AcceptedS:  map[string]float64{"a": 1, "r": 10, "d": 19},
			FirstSeenS: map[string]float64{"a": 1.1, "r": 14.2, "d": 23.5},
			want:       []string{"1 (per window: 1)", "1 (per window: 1)", "1 (per window: 1)"},
			wantOK:     []bool{true, true, true},
		},
		{
			name:       "a relay that bypasses the proxy publishes at once: nothing is held back",
			AcceptedS:  map[string]float64{"a": 1, "r": 10, "d": 19},
			FirstSeenS: map[string]float64{"a": 1.1, "r": 10.1, "d": 19.1},
			want:       []string{"1 (per window: 1)", "0 (per window: 0)", "0 (per window: 0)"},
			wantOK:     []bool{true, false, false},
		},
		{
			name:       "an event never published is held back by every later window",
			AcceptedS:  map[string]float64{"a": 1},
			FirstSeenS: map[string]float64{},
			want:       []string{"0 (per window: 0)", "1 (per window: 1)", "1 (per window: 1)"},
			wantOK:     []bool{false, true, true},
		},
		{
			name:       "accepted less than healthyPublishS before the end: maybe just on its way",
			AcceptedS:  map[string]float64{"r": 13.5},
			FirstSeenS: map[string]float64{"r": 14.1},
			want:       []string{"0 (per window: 0)", "0 (per window: 0)", "0 (per window: 0)"},
			wantOK:     []bool{false, false, false},
		},
		{
			name:       "the warm-up payment, seen during a window, is not the load's",
			AcceptedS:  map[string]float64{},
			FirstSeenS: map[string]float64{"warm": 0.5},
			want:       []string{"0 (per window: 0)", "0 (per window: 0)", "0 (per window: 0)"},
			wantOK:     []bool{false, false, false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &verdict.Report{FaultWindows: testWindows, Evidence: &verdict.Evidence{AcceptedS: tt.AcceptedS, FirstSeenS: tt.FirstSeenS}}
			var got []string
			var gotOK []bool
			for _, c := range FaultChecks(r, faults.DropAcks, faults.DropRequests, faults.ProxyDown) {
				if c.Kind != verdict.Validity {
					t.Errorf("row %q: kind %s, want validity", c.Name, c.Kind)
				}
				got = append(got, c.Got)
				gotOK = append(gotOK, c.OK)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rows' got (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantOK, gotOK); diff != "" {
				t.Errorf("rows' ok (-want +got):\n%s", diff)
			}
		})
	}
}

// Two windows of one kind are counted apart, so a kind whose first window missed shows.
func TestFaultChecksPerWindow(t *testing.T) {
	t.Parallel()
	windows := []faults.Window{{Kind: faults.ProxyDown, StartS: 0, EndS: 5}, {Kind: faults.ProxyDown, StartS: 10, EndS: 15}}
	r := &verdict.Report{FaultWindows: windows, Evidence: &verdict.Evidence{
		AcceptedS:  map[string]float64{"p1": 11, "p2": 11},
		FirstSeenS: map[string]float64{"p1": 15.5, "p2": 16},
	}}
	c := FaultChecks(r, faults.ProxyDown)[0]
	if c.Got != "2 (per window: 0, 2)" || !c.OK {
		t.Errorf("got %q ok %t, want %q ok true", c.Got, c.OK, "2 (per window: 0, 2)")
	}
}

// A relay that bypasses the proxy while the proxy held the harness's own probe: the row
// fails and names the reason.
func TestFaultChecksNameABypass(t *testing.T) {
	t.Parallel()
	windows := []faults.Window{{Kind: faults.DropRequests, StartS: 0, EndS: 5, Probe: faults.ProbeNoAnswer}}
	r := &verdict.Report{FaultWindows: windows, Evidence: &verdict.Evidence{
		AcceptedS:  map[string]float64{"p1": 1},
		FirstSeenS: map[string]float64{"p1": 1.1},
	}}
	c := FaultChecks(r, faults.DropRequests)[0]
	if want := "0 (per window: 0); the proxy held the harness's probe, so the service's relay is not behind it"; c.Got != want || c.OK {
		t.Errorf("got %q ok %t, want %q ok false", c.Got, c.OK, want)
	}
}

func TestProbeCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		probes []string
		want   bool
	}{
		{"every fault in force", []string{faults.ProbeNoAnswer, faults.ProbeNoAnswer, faults.ProbeRefused}, true},
		{"one window answered: that fault was not in force", []string{faults.ProbeNoAnswer, faults.ProbeAnswered}, false},
		{"the probe itself failed", []string{"probe failed: no such host"}, false},
		{"nothing probed", []string{""}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &verdict.Report{}
			for _, p := range tt.probes {
				r.FaultWindows = append(r.FaultWindows, faults.Window{Kind: faults.DropAcks, EndS: 1, Probe: p})
			}
			if got := ProbeCheck(r); got.OK != tt.want || got.Kind != verdict.Validity {
				t.Errorf("got %+v, want a validity row with ok %t", got, tt.want)
			}
		})
	}
}

func TestPostgresRestartCheck(t *testing.T) {
	t.Parallel()
	at := func(s float64) *float64 { return &s }
	tests := []struct {
		name    string
		started *float64
		want    bool
	}{
		{"restarted during the load", at(12), true},
		{"the server of before the run: no restart", at(-3600), false},
		{"restarted after the load", at(40), false},
		{"start time unreadable", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &verdict.Report{Evidence: &verdict.Evidence{LoadStartS: 6, LoadEndS: 27, PostgresStartS: tt.started}}
			if got := PostgresRestartCheck(r); got.OK != tt.want || got.Kind != verdict.Validity {
				t.Errorf("got %+v, want a validity row with ok %t", got, tt.want)
			}
		})
	}
}

func TestInjectedCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		injected int
		want     bool
	}{{0, false}, {4, true}} {
		r := &verdict.Report{Evidence: &verdict.Evidence{InjectedCopies: tt.injected, ServiceCopies: 7}}
		if got := InjectedCheck(r); got.OK != tt.want {
			t.Errorf("%d injected: ok %t, want %t (%+v)", tt.injected, got.OK, tt.want, got)
		}
	}
}

func TestCountList(t *testing.T) {
	t.Parallel()
	got := countList(map[string]int{"transport error": 2, "status 503": 12, "status 409": 2})
	if want := "status 503 ×12, status 409 ×2, transport error ×2"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// The real server answers with a start time in the past: the value the db-restart
// scenario compares with its load.
func TestPostgresStartedAt(t *testing.T) {
	t.Parallel()
	started, err := postgresStartedAt(t.Context(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatalf("postgresStartedAt: %v", err)
	}
	if started.IsZero() || started.After(time.Now()) {
		t.Errorf("start time %v, want a time in the past", started)
	}
	if _, err := postgresStartedAt(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"); err == nil {
		t.Error("no server: got no error")
	}
}
