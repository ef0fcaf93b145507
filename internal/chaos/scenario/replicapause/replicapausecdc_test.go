package replicapause

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/google/go-cmp/cmp"
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
func TestUnfencedAfterResume(t *testing.T) {
	t.Parallel()
	origin := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rn := twoReplicaLogs(t, origin, []string{lost("12:00:12"), lost("12:00:52")}, []string{lost("12:00:55")})
	disruptions := []verdict.Disruption{
		{What: resumedAlone, Detail: "api", AtSeconds: 10},
		{What: resumedAlone, Detail: "api-2", AtSeconds: 30},
		{What: resumedAlone, Detail: "api", AtSeconds: 50},
	}
	end := origin.Add(time.Minute)
	unfenced, resumed := unfencedAfterResume(disruptions, rn, end)
	if diff := cmp.Diff([]string{"api-2 resumed at 30.000 s"}, unfenced); diff != "" || resumed != 3 {
		t.Errorf("unfencedAfterResume: %d resumed, want 3; unfenced (-want +got):\n%s", resumed, diff)
	}
	if unfenced, resumed := unfencedAfterResume(disruptions[:2], rn, end); len(unfenced) != 0 || resumed != 2 {
		t.Errorf("unfencedAfterResume of the first two = %v of %d, want none of 2 (the last window runs to the end)", unfenced, resumed)
	}
}

// Three resumes of the CDC relay, with the relay's log lines and the resume instants
// as a harness that recorded each resume after its SIGCONT saw them: api logged its
// first lost session at 19.369525 s, 2.2 ms before the resume recorded at 19.371680 s.
// The matching is right to leave that line out: a tolerance would only guess how late
// the harness gets the CPU back after the signal. The instant is what must be right,
// and resumeAlone takes it before the signal (TestResumeAloneRecordsWhileStopped). The
// other two lines, 38 ms and 21 ms after their resumes, count.
func TestUnfencedAfterResumeLeavesOutALineBeforeTheResume(t *testing.T) {
	t.Parallel()
	origin := time.Date(2026, 12, 1, 19, 1, 4, 604961379, time.UTC)
	rn := twoReplicaLogs(t, origin,
		[]string{lost("19:01:23.974486832"), lost("19:02:02.09761465")},
		[]string{lost("19:01:42.672171121")})
	disruptions := []verdict.Disruption{
		{What: pausedStreaming, Detail: "api, 7 outbox rows pending", AtSeconds: 5.347742005},
		{What: resumedAlone, Detail: "api", AtSeconds: 19.371679941},
		{What: pausedStreaming, Detail: "api-2, 89 outbox rows pending", AtSeconds: 24.010030744},
		{What: resumedAlone, Detail: "api-2", AtSeconds: 38.029253443},
		{What: pausedStreaming, Detail: "api, 172 outbox rows pending", AtSeconds: 43.45191157},
		{What: resumedAlone, Detail: "api", AtSeconds: 57.471976388},
	}
	unfenced, resumed := unfencedAfterResume(disruptions, rn, origin.Add(95*time.Second))
	if diff := cmp.Diff([]string{"api resumed at 19.372 s"}, unfenced); diff != "" || resumed != 3 {
		t.Errorf("unfencedAfterResume: %d resumed, want 3; unfenced (-want +got):\n%s", resumed, diff)
	}
}

// twoReplicaLogs returns a Run whose api and api-2 have written the given log lines.
func twoReplicaLogs(t *testing.T, origin time.Time, api, replica []string) *harness.Run {
	t.Helper()
	dir := t.TempDir()
	rn := &harness.Run{Origin: origin,
		API:     &stack.Process{Name: "api", LogPath: filepath.Join(dir, "api.log")},
		Replica: &stack.Process{Name: "api-2", LogPath: filepath.Join(dir, "api-2.log")}}
	for path, lines := range map[string][]string{rn.API.LogPath: api, rn.Replica.LogPath: replica} {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return rn
}

// lost is the CDC relay's log line for a session that ended, written at the given UTC
// time of the fixture's day.
func lost(at string) string {
	return `{"time":"2026-12-01T` + at + `Z","level":"WARN","msg":"replication stream lost; reconnecting","component":"outbox_cdc_relay"}` + "\n"
}
