package chaos

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A row the paused replica must not touch counts as changed when any of its columns
// differs afterwards, or when it is gone; rows that appear later are not its business.
func TestChangedRows(t *testing.T) {
	t.Parallel()
	before := map[string]outboxRowState{
		"published": {Status: "published", PublishedAt: "12:00:01"},
		"leased":    {Status: "pending", LeaseToken: "t-other"},
		"same":      {Status: "published", PublishedAt: "12:00:02"},
		"gone":      {Status: "published", PublishedAt: "12:00:03"},
	}
	after := map[string]outboxRowState{
		"published": {Status: "published", PublishedAt: "12:00:09"}, // marked again, late
		"leased":    {Status: "published", PublishedAt: "12:00:09"}, // the other's lease overwritten
		"same":      {Status: "published", PublishedAt: "12:00:02"},
		"new":       {Status: "pending", LeaseToken: "t-mine"},
	}
	if diff := cmp.Diff([]string{"gone", "leased", "published"}, changedRows(before, after)); diff != "" {
		t.Errorf("changed rows (-want +got):\n%s", diff)
	}
	if got := changedRows(before, before); len(got) != 0 {
		t.Errorf("changed rows of an unchanged outbox = %v, want none", got)
	}
}

// The fenced outcomes are summed from our relay's log lines, and only from those.
func TestFencedOutcomes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "api.log")
	log := `{"level":"INFO","msg":"relay started"}
{"level":"WARN","msg":"lease lost before marking; another worker owns the events","component":"outbox_relay","events":3}
{"level":"WARN","msg":"publish failed","events":7}
{"level":"WARN","msg":"lease lost before marking; another worker owns the events","component":"outbox_relay","events":2}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := fencedOutcomes(path); got != 5 {
		t.Errorf("fencedOutcomes = %d, want 5", got)
	}
	if got := fencedOutcomes(filepath.Join(t.TempDir(), "missing.log")); got != -1 {
		t.Errorf("fencedOutcomes of a missing log = %d, want -1", got)
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
