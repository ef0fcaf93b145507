package docs

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// readmeMaxWords keeps the README a first screen and a map: the rest lives in docs/.
const readmeMaxWords = 1500

func TestReadmeFitsItsLength(t *testing.T) {
	t.Parallel()
	if n := wordCount(readRepoFile(t, "README.md")); n > readmeMaxWords {
		t.Errorf("README.md has %d words (wc -w), want at most %d: move detail to docs/", n, readmeMaxWords)
	}
}

// The README's sample verdict is made of lines the harness prints for the curated run in
// docs/sample (a line "  ..." stands for the table it leaves out): every figure it quotes
// comes from that JSON, as the harness reads it.
func TestReadmeSampleIsTheSampleRunsVerdict(t *testing.T) {
	t.Parallel()
	block := codeBlockAfter(t, readRepoFile(t, "README.md"), "## The verdict")
	report := recordedReport(t, "docs/sample/chaos-default.json")
	var printed strings.Builder
	report.PrintTable(&printed)
	lines := strings.Split(printed.String(), "\n")
	if len(block) == 0 {
		t.Fatal("README.md: no sample verdict under \"## The verdict\"")
	}
	for _, line := range block {
		if line != "  ..." && !slices.Contains(lines, line) {
			t.Errorf("README.md sample line %q is not a line the harness prints for docs/sample/chaos-default.json", line)
		}
	}
	headline := lines[1] // PrintTable starts with an empty line
	if !slices.Contains(block, headline) {
		t.Errorf("README.md sample lacks the verdict's headline %q", headline)
	}
}

// The scenario table names every scenario once, and its "run" column is the duration of
// the recorded full run of each: docs/sample for default, the timeline's test data for
// the others.
func TestReadmeScenarioTable(t *testing.T) {
	t.Parallel()
	rows := tableAfter(t, readRepoFile(t, "README.md"), "<!--scenarios-->")
	seen := map[string]bool{}
	for _, row := range rows {
		if len(row) < 4 {
			t.Fatalf("scenario row %q: want at least 4 cells", row)
		}
		name := strings.Trim(row[0], "` ")
		if seen[name] {
			t.Errorf("scenario %s is listed twice", name)
		}
		seen[name] = true
		if !chaos.IsScenario(name) || name == "all" {
			t.Errorf("README.md lists %q, which is no scenario of the harness", name)
			continue
		}
		path := filepath.Join("internal", "chaos", "timeline", "testdata", "chaos-"+name+".json")
		if name == "default" {
			path = filepath.Join("docs", "sample", "chaos-default.json")
		}
		report := recordedReport(t, path)
		want := fmt.Sprintf("%d s", int(math.Round(report.DurationSeconds)))
		if got := strings.TrimSpace(row[3]); got != want {
			t.Errorf("scenario %s: README says the run takes %q, its recorded run %s took %q", name, got, path, want)
		}
	}
	for _, name := range chaos.ScenarioNames() {
		if !seen[name] {
			t.Errorf("README.md's scenario table lacks %s", name)
		}
	}
}

func recordedReport(t *testing.T, rel string) *verdict.Report {
	t.Helper()
	var r verdict.Report
	if err := json.Unmarshal([]byte(readRepoFile(t, rel)), &r); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return &r
}

// codeBlockAfter returns the lines of the first fenced code block after the line heading.
func codeBlockAfter(t *testing.T, doc, heading string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("no line %q", heading)
	}
	_, rest, ok = strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("no code block after %q", heading)
	}
	body, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("unclosed code block after %q", heading)
	}
	return strings.Split(strings.TrimSuffix(body, "\n"), "\n")
}

// tableAfter returns the cells of the body rows of the first Markdown table after the
// line marker (its header and separator rows skipped).
func tableAfter(t *testing.T, doc, marker string) [][]string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+marker+"\n")
	if !ok {
		t.Fatalf("no line %q", marker)
	}
	var rows [][]string
	for i, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if i < 2 {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("no table after %q", marker)
	}
	return rows
}
