package relay

import (
	"io"
	"testing"
)

func TestParseRelayFlags(t *testing.T) {
	t.Parallel()
	c, err := parseRelayFlags([]string{"-backlog", "5000", "-reps", "1", "-explain"}, io.Discard)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if c.Backlog != 5000 || c.Reps != 1 || !c.diagnose.explain || c.LatencyRate != 1000 {
		t.Errorf("got backlog %d, reps %d, explain %t, latency rate %d; want 5000, 1, true, 1000",
			c.Backlog, c.Reps, c.diagnose.explain, c.LatencyRate)
	}
	if c.apiLoadClients != defaultAPILoadClients {
		t.Errorf("api load clients without -api-load: got %d, want the default %d", c.apiLoadClients, defaultAPILoadClients)
	}
	if _, err := parseRelayFlags([]string{"-reps", "0"}, io.Discard); err == nil {
		t.Error("-reps 0: got no error, want one")
	}
}

func TestParseRelayFlagsAPILoadAndTraces(t *testing.T) {
	t.Parallel()
	c, err := parseRelayFlags([]string{"-api-load", "8", "-trace", "/tmp/t", "-latency-trace", "/tmp/l"}, io.Discard)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if c.apiLoadClients != 8 || c.diagnose.goTrace != "/tmp/t" || c.diagnose.latencyTrace != "/tmp/l" {
		t.Errorf("got api load %d, trace %q, latency trace %q; want 8, /tmp/t, /tmp/l",
			c.apiLoadClients, c.diagnose.goTrace, c.diagnose.latencyTrace)
	}
	if c, err := parseRelayFlags([]string{"-api-load", "0"}, io.Discard); err != nil || c.apiLoadClients != 0 {
		t.Errorf("-api-load 0: got %d clients, error %v; want 0 and no error (no load)", c.apiLoadClients, err)
	}
	if _, err := parseRelayFlags([]string{"-api-load", "-1"}, io.Discard); err == nil {
		t.Error("-api-load -1: got no error, want one")
	}
}
