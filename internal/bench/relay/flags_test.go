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
	if _, err := parseRelayFlags([]string{"-reps", "0"}, io.Discard); err == nil {
		t.Error("-reps 0: got no error, want one")
	}
}
