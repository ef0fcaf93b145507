package mutants

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/repo"
)

const diff = "diff --git a/x.go b/x.go\n--- a/x.go\n+++ b/x.go\n@@ -1 +1 @@\n-a\n+b\n"

func TestParseHeader(t *testing.T) {
	t.Parallel()
	complete := "Bug: the bug,\n  continued\nLesson: the lesson\nScenarios: kafka-down, default\nVerdict row: lost\nIf it survives: why\n\n"
	tests := []struct {
		name    string
		patch   string
		want    Mutant
		wantErr string
	}{
		{
			name:  "complete header with a continuation line",
			patch: complete + diff,
			want: Mutant{
				Name: "01-x", Bug: "the bug, continued", Lesson: "the lesson", VerdictRow: "lost",
				IfItSurvives: "why", Scenarios: []string{"kafka-down", "default"}, RelayMode: "poll",
			},
		},
		{
			name:  "a mutant of the CDC relay",
			patch: complete[:len(complete)-1] + "Relay mode: cdc\n\n" + diff,
			want: Mutant{
				Name: "01-x", Bug: "the bug, continued", Lesson: "the lesson", VerdictRow: "lost",
				IfItSurvives: "why", Scenarios: []string{"kafka-down", "default"}, RelayMode: "cdc",
			},
		},
		{name: "unknown relay mode", patch: complete[:len(complete)-1] + "Relay mode: stream\n\n" + diff, wantErr: `relay mode "stream"`},
		{name: "missing field", patch: strings.Replace(complete, "Lesson: the lesson\n", "", 1) + diff, wantErr: `no "Lesson" field`},
		{name: "no diff", patch: complete, wantErr: "no \"diff --git\" section"},
		{name: "unknown scenario", patch: strings.Replace(complete, "kafka-down", "kafka-slow", 1) + diff, wantErr: `scenario "kafka-slow"`},
		{name: "dual-write is not a mutant's scenario", patch: strings.Replace(complete, "kafka-down", "dual-write", 1) + diff, wantErr: `scenario "dual-write"`},
		{name: "stray line", patch: "just words\n" + complete + diff, wantErr: `header line "just words"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parse("01-x", []byte(tt.patch))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parse: got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("parse (-want +got):\n%s", d)
			}
		})
	}
}

// TestEveryPatchAppliesAndBuilds keeps the patches honest on every change of the code
// they mutate: each must still apply to the checkout as it is and build both services.
// A patch that fails here is what the suite would report as a SUITE ERROR.
func TestEveryPatchAppliesAndBuilds(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	all, err := Load(filepath.Join(root, "mutants"))
	if err != nil {
		t.Fatal(err)
	}
	// The ten bugs in mutants/ at least; more may come, none may go unnoticed.
	if len(all) < 10 {
		t.Errorf("mutants: got %d patches, want at least 10", len(all))
	}
	for _, m := range all {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			bins, scratch, err := Prepare(t.Context(), root, m)
			if scratch != nil {
				defer scratch.Remove()
				if strings.HasPrefix(scratch.Dir, root) {
					t.Errorf("scratch copy %s is inside the checkout %s", scratch.Dir, root)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			for pkg, bin := range bins {
				if _, err := os.Stat(bin); err != nil {
					t.Errorf("binary of %s: %v", pkg, err)
				}
			}
		})
	}
}

// TestBrokenPatchesAreSuiteErrors checks the two ways a patch goes stale: it no longer
// applies, or it applies and no longer builds. Both must be errors, never a mutant
// quietly run as the unmutated service.
func TestBrokenPatchesAreSuiteErrors(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, patch, wantErr string
	}{
		{
			name:    "context no longer matches",
			patch:   "diff --git a/go.mod b/go.mod\n--- a/go.mod\n+++ b/go.mod\n@@ -1 +1 @@\n-module example.com/not-this-module\n+module example.com/mutated\n",
			wantErr: "patch no longer applies",
		},
		{
			name:    "applies but does not build",
			patch:   "diff --git a/cmd/api/broken.go b/cmd/api/broken.go\nnew file mode 100644\n--- /dev/null\n+++ b/cmd/api/broken.go\n@@ -0,0 +1,3 @@\n+package main\n+\n+var _ = notDefinedAnywhere\n",
			wantErr: "mutant no longer builds",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "broken.patch")
			if err := os.WriteFile(path, []byte(tt.patch), 0o644); err != nil {
				t.Fatal(err)
			}
			_, scratch, err := Prepare(t.Context(), root, Mutant{Name: "broken", Path: path})
			if scratch != nil {
				defer scratch.Remove()
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Prepare: got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestPrintTable(t *testing.T) {
	t.Parallel()
	results := []Result{
		{
			Mutant:   Mutant{Name: "06-no-dedup", Scenarios: []string{"default", "relay-crash"}},
			KilledBy: "default",
			Runs:     []ScenarioResult{{Scenario: "default", Outcome: Killed, Verdict: "FAIL"}, {Scenario: "relay-crash", Outcome: NotRun}},
		},
		{
			Mutant: Mutant{Name: "10-mark-without-lease-token", Scenarios: []string{"relay-crash"}, IfItSurvives: "needs a paused relay"},
			Runs:   []ScenarioResult{{Scenario: "relay-crash", Outcome: Survived, Verdict: "INVALID"}},
		},
		{
			Mutant:     Mutant{Name: "11-stale", Scenarios: []string{"default"}},
			SuiteError: "patch no longer applies",
			Runs:       []ScenarioResult{{Scenario: "default", Outcome: NotRun}},
		},
	}
	var b bytes.Buffer
	PrintTable(&b, results)
	want := `mutant                       default  relay-crash         result
06-no-dedup                  killed   not run             killed by default
10-mark-without-lease-token  -        survived (INVALID)  SURVIVED
11-stale                     not run  -                   SUITE ERROR

mutation score: 1 of 3 killed (33%); 1 SUITE ERRORS (a patch that no longer applies or builds): fix the patches
  survivor 10-mark-without-lease-token: needs a paused relay
`
	if d := cmp.Diff(want, b.String()); d != "" {
		t.Errorf("table (-want +got):\n%s", d)
	}
}

func TestWriteReport(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	results := []Result{{
		Mutant:   Mutant{Name: "06-no-dedup", Path: filepath.Join(root, "mutants", "06-no-dedup.patch"), Scenarios: []string{"default"}},
		KilledBy: "default",
		Runs:     []ScenarioResult{{Scenario: "default", Outcome: Killed, Verdict: "FAIL", FailedChecks: []string{"slo dlq: got 1, want 0"}}},
	}}
	// reports/ is not in a fresh clone: the report makes it.
	path := filepath.Join(root, "reports", "mutants.json")
	if err := WriteReport(path, root, Config{Short: true}, results); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := Score{Killed: 1, Mutants: 1, Percent: 100}
	if d := cmp.Diff(want, got.Score); d != "" {
		t.Errorf("score (-want +got):\n%s", d)
	}
	if got.Mutants[0].Path != filepath.Join("mutants", "06-no-dedup.patch") {
		t.Errorf("patch path: got %q, want it relative to the root", got.Mutants[0].Path)
	}
	if got.Payments != 100 || !got.Short {
		t.Errorf("run settings: got payments %d short %t, want 100 and true", got.Payments, got.Short)
	}
	// "want > 0" must read as written, not as "want \u003e 0".
	if err := WriteReport(path, root, Config{}, []Result{{Mutant: Mutant{Name: "x"}, Runs: []ScenarioResult{{FailedChecks: []string{"want > 0"}}}}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !bytes.Contains(b, []byte("want > 0")) {
		t.Errorf("report escapes the checks:\n%s", b)
	}
}
