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

// Each resumed relay must log the end of its session before the next one resumes: the
// one that notices only later (here api-2, after api's resume) kept publishing for a
// session that was over, and its pause does not count.
func TestFencedAfterResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	origin := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rn := &Run{origin: origin,
		API:     &Process{Name: "api", LogPath: filepath.Join(dir, "api.log")},
		Replica: &Process{Name: "api-2", LogPath: filepath.Join(dir, "api-2.log")}}
	lost := func(at string) string {
		return `{"time":"2026-12-01T` + at + `Z","level":"WARN","msg":"replication stream lost; reconnecting","component":"outbox_cdc_relay"}` + "\n"
	}
	if err := os.WriteFile(rn.API.LogPath, []byte(lost("12:00:12")+lost("12:00:52")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rn.Replica.LogPath, []byte(lost("12:00:55")), 0o644); err != nil {
		t.Fatal(err)
	}
	disruptions := []Disruption{
		{What: resumedAlone, Detail: "api", AtSeconds: 10},
		{What: resumedAlone, Detail: "api-2", AtSeconds: 30},
		{What: resumedAlone, Detail: "api", AtSeconds: 50},
	}
	end := origin.Add(time.Minute)
	if fenced, resumed := fencedAfterResume(disruptions, rn, end); fenced != 2 || resumed != 3 {
		t.Errorf("fencedAfterResume = %d of %d, want 2 of 3 (api-2 noticed after api resumed)", fenced, resumed)
	}
	if fenced, resumed := fencedAfterResume(disruptions[:2], rn, end); fenced != 2 || resumed != 2 {
		t.Errorf("fencedAfterResume of the first two = %d of %d, want 2 of 2 (the last window runs to the end)", fenced, resumed)
	}
}
