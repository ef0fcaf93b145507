package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxRubricItems bounds the rubric's gating items: what a mentor scores in thirty minutes.
const maxRubricItems = 12

var (
	// rubricRow and rubricTest are the evidence an item names: row `<verdict row>` and
	// test `<TestName>`.
	rubricRow  = regexp.MustCompile("\\brow `([^`]+)`")
	rubricTest = regexp.MustCompile("\\btest `([^`]+)`")
)

// Every gating item of docs/rubric.md names at least one verdict row that the harness
// prints (a string literal of internal/chaos) or a Go test that exists, and there are at
// most maxRubricItems of them.
func TestRubricItemsNameRowsAndTestsThatExist(t *testing.T) {
	t.Parallel()
	items := rubricItems(t, readRepoFile(t, "docs/rubric.md"))
	if len(items) == 0 {
		t.Fatal("docs/rubric.md: no item found in the table under \"## Gating items\"")
	}
	if len(items) > maxRubricItems {
		t.Errorf("docs/rubric.md has %d gating items, want at most %d", len(items), maxRubricItems)
	}
	harness := goSources(t, filepath.Join(repoRoot, "internal", "chaos"), false)
	tests := goSources(t, repoRoot, true)
	for _, item := range items {
		rows, names := rubricRow.FindAllStringSubmatch(item, -1), rubricTest.FindAllStringSubmatch(item, -1)
		if len(rows)+len(names) == 0 {
			t.Errorf("rubric item names no row `...` and no test `...`: %s", item)
		}
		for _, m := range rows {
			if !strings.Contains(harness, `"`+m[1]+`"`) {
				t.Errorf("rubric names the verdict row %q, which is no string literal of internal/chaos", m[1])
			}
		}
		for _, m := range names {
			if !strings.Contains(tests, "func "+m[1]+"(t *testing.T)") {
				t.Errorf("rubric names the test %s, which no _test.go file of the repository defines", m[1])
			}
		}
	}
}

// rubricItems returns the data rows of the table under "## Gating items".
func rubricItems(t *testing.T, doc string) []string {
	t.Helper()
	var items []string
	in, header := false, 0
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Gating items"
		case in && strings.HasPrefix(line, "|"):
			header++
			if header > 2 { // the header row and the |---| row
				items = append(items, line)
			}
		case in && header > 0:
			return items // the table ended
		}
	}
	return items
}

// goSources concatenates the .go files under dir: the tests (_test.go) when tests, else
// the others. Hidden directories (.git, .stack) are skipped.
func goSources(t *testing.T, dir string, tests bool) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") != tests {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b.Write(data)
		return nil
	})
	if err != nil {
		t.Fatalf("read Go sources under %s: %v", dir, err)
	}
	return b.String()
}
