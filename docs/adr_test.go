package docs

import (
	"path/filepath"
	"regexp"
	"testing"
)

// maxADRWords bounds an ADR, counted as `wc -w` counts (wordCount): a decision record a
// student reads in one sitting, its figures cited from docs/bench.md.
const maxADRWords = 1000

var statusLine = regexp.MustCompile(`(?m)^Status: \S`)

// Every ADR says whether it stands (a "Status: ..." line) and fits in maxADRWords.
func TestADRsHaveAStatusAndFitTheirLength(t *testing.T) {
	t.Parallel()
	adrs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "adr", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(adrs) == 0 {
		t.Fatal("no ADR found in docs/adr")
	}
	for _, adr := range adrs {
		rel, _ := filepath.Rel(repoRoot, adr)
		text := readRepoFile(t, filepath.ToSlash(rel))
		if !statusLine.MatchString(text) {
			t.Errorf("%s has no line starting with \"Status: \"", rel)
		}
		if n := wordCount(text); n > maxADRWords {
			t.Errorf("%s has %d words (wc -w), want at most %d", rel, n, maxADRWords)
		}
	}
}
