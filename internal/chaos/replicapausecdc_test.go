package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Only the CDC relay's own line counts, and only inside the window: a session lost
// before the pause, or another component's line, proves nothing about the fence.
func TestSessionsEnded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "api.log")
	log := `{"time":"2026-12-01T12:00:05Z","level":"WARN","msg":"replication stream lost; reconnecting","component":"outbox_cdc_relay"}
{"time":"2026-12-01T12:00:11Z","level":"WARN","msg":"replication stream lost; reconnecting","component":"outbox_cdc_relay"}
{"time":"2026-12-01T12:00:12Z","level":"WARN","msg":"replication stream lost; reconnecting","component":"payment"}
{"time":"2026-12-01T12:00:13Z","level":"WARN","msg":"publish failed; Kafka unreachable? retrying the same events","component":"outbox_cdc_relay","events":2}
{"time":"2026-12-01T12:00:19Z","level":"WARN","msg":"replication stream lost; reconnecting","component":"outbox_cdc_relay"}
{"time":"2026-12-01T12:00:20Z","level":"WARN","msg":"replication stream lost; reconnecting","component":"outbox_cdc_relay"}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)
	if got := sessionsEnded(path, from, from.Add(10*time.Second)); got != 2 {
		t.Errorf("sessionsEnded = %d, want 2 (12:00:11 and 12:00:19)", got)
	}
	if got := sessionsEnded(filepath.Join(t.TempDir(), "missing.log"), from, from); got != -1 {
		t.Errorf("sessionsEnded of a missing log = %d, want -1", got)
	}
}
