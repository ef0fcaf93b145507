package benchreport

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPromoteReplacesTheRunsFiguresAndKeepsTheOthers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run, published := filepath.Join(dir, "reports", "bench.json"), filepath.Join(dir, "docs", "bench.json")
	if err := Merge(published, map[string]any{"relay_drain_events_per_s": 100.0, "scale_bench_reps": 3.0}); err != nil {
		t.Fatal(err)
	}
	if err := Merge(run, map[string]any{"relay_drain_events_per_s": 200.0, "api_payments_per_s": 50.0}); err != nil {
		t.Fatal(err)
	}

	if err := Promote(run, published); err != nil {
		t.Fatalf("Promote: %v", err)
	}

	want := map[string]any{
		"relay_drain_events_per_s": 200.0, // measured by the run: replaced
		"api_payments_per_s":       50.0,  // new in the run: added
		"scale_bench_reps":         3.0,   // not measured by the run: kept
	}
	if diff := cmp.Diff(want, readJSON(t, published)); diff != "" {
		t.Errorf("published figures after Promote (-want +got):\n%s", diff)
	}
}

func TestPromoteWithoutARunLeavesThePublishedFiguresAlone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	published := filepath.Join(dir, "bench.json")
	if err := Merge(published, map[string]any{"relay_drain_events_per_s": 100.0}); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, from := range []string{filepath.Join(dir, "missing.json"), empty} {
		if err := Promote(from, published); err == nil {
			t.Errorf("Promote(%s): no error, want one", filepath.Base(from))
		}
	}
	if diff := cmp.Diff(map[string]any{"relay_drain_events_per_s": 100.0}, readJSON(t, published)); diff != "" {
		t.Errorf("published figures after failed Promotes (-want +got):\n%s", diff)
	}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return got
}
