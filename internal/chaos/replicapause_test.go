package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A row the paused replica must not touch counts as changed when any of its columns
// differs afterwards, or when it is gone; rows that appear later are not its business,
// and neither is a row that a batch's transaction no longer holds afterwards (the
// database ended the frozen replica's transaction: the row was free to take).
func TestChangedRows(t *testing.T) {
	t.Parallel()
	before := map[string]outboxRowState{
		"published": {Status: "published", Detail: "12:00:01"},
		"leased":    {Status: "pending", Owner: "t-other"},
		"held":      {Status: "pending", Owner: "held", Detail: "0"},
		"released":  {Status: "pending", Owner: "held", Detail: "0"},
		"same":      {Status: "published", Detail: "12:00:02"},
		"gone":      {Status: "published", Detail: "12:00:03"},
	}
	after := map[string]outboxRowState{
		"published": {Status: "published", Detail: "12:00:09"},       // marked again, late
		"leased":    {Status: "published", Detail: "12:00:09"},       // the other's lease overwritten
		"held":      {Status: "pending", Owner: "held", Detail: "1"}, // a failure counted under another's lock
		"released":  {Status: "published", Detail: "12:00:09"},       // taken after the database ended the lock
		"same":      {Status: "published", Detail: "12:00:02"},
		"new":       {Status: "pending", Owner: "t-mine"},
	}
	if diff := cmp.Diff([]string{"gone", "held", "leased", "published"}, changedRows(before, after)); diff != "" {
		t.Errorf("changed rows (-want +got):\n%s", diff)
	}
	if got := changedRows(before, before); len(got) != 0 {
		t.Errorf("changed rows of an unchanged outbox = %v, want none", got)
	}
}

// The late outcomes are the relay's outcome lines inside the windows, and only those.
func TestLateOutcomes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "api.log")
	log := `{"time":"2026-12-01T12:00:00Z","level":"WARN","msg":"Kafka unavailable; relay backs off, events stay pending","component":"outbox_relay","events":9}
{"time":"2026-12-01T12:00:11Z","level":"WARN","msg":"lease expired before the batch was recorded; its events will be published again","component":"outbox_relay","events":3}
{"time":"2026-12-01T12:00:12Z","level":"WARN","msg":"Kafka unavailable; relay backs off, events stay pending","component":"outbox_relay","events":2}
{"time":"2026-12-01T12:00:12Z","level":"INFO","msg":"relay started","component":"outbox_relay"}
{"time":"2026-12-01T12:00:12Z","level":"WARN","msg":"write response","component":"payment","events":4}
{"time":"2026-12-01T12:00:30Z","level":"WARN","msg":"lease expired before the batch was recorded; its events will be published again","component":"outbox_relay","events":5}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)
	late, fenced := lateOutcomes(path, [][2]time.Time{{start, start.Add(4 * time.Second)}})
	if late != 5 || fenced != 3 {
		t.Errorf("lateOutcomes = %d late, %d fenced; want 5 and 3", late, fenced)
	}
	if late, _ := lateOutcomes(filepath.Join(t.TempDir(), "missing.log"), nil); late != -1 {
		t.Errorf("lateOutcomes of a missing log = %d, want -1", late)
	}
}

// With replicas, a payment's attempts go round the replicas, as a load balancer would.
func TestLoadSpreadsOverReplicas(t *testing.T) {
	t.Parallel()
	cfg := LoadConfig{BaseURL: "a", Replicas: []string{"b"}}
	var got []string
	for i := range 4 {
		got = append(got, cfg.url(i))
	}
	if diff := cmp.Diff([]string{"a", "b", "a", "b"}, got); diff != "" {
		t.Errorf("urls (-want +got):\n%s", diff)
	}
	if one := (LoadConfig{BaseURL: "a"}); one.url(3) != "a" {
		t.Errorf("url without replicas = %q, want a", one.url(3))
	}
}
