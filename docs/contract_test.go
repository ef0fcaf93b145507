package docs

import (
	"strings"
	"testing"
)

const (
	// appendixHeading separates what a student must build from the reference
	// configuration of this repository's own service.
	appendixHeading = "## Appendix: the reference configuration"
	// maxStudentContractWords bounds the student's part, counted as `wc -w` counts.
	maxStudentContractWords = 2000
)

// The student's part of the contract (everything before the appendix) fits in
// maxStudentContractWords, and the whole file has one MUST/MAY table: two tables of
// requirements drift apart.
func TestContractStudentPartIsShortWithOneRequirementsTable(t *testing.T) {
	t.Parallel()
	text := readRepoFile(t, "docs/contract.md")
	student, _, found := strings.Cut(text, "\n"+appendixHeading+"\n")
	if !found {
		t.Fatalf("docs/contract.md has no line %q: the student's part has no end", appendixHeading)
	}
	if n := wordCount(student); n > maxStudentContractWords {
		t.Errorf("docs/contract.md before the appendix has %d words (wc -w), want at most %d", n, maxStudentContractWords)
	}
	if n := requirementTables(text); n != 1 {
		t.Errorf("docs/contract.md has %d tables with MUST or MAY rows, want exactly 1", n)
	}
}

// requirementTables counts the markdown tables with at least one row whose first cell
// is MUST or MAY (possibly qualified, as "MUST (with the lifecycle)").
func requirementTables(doc string) int {
	tables, counted := 0, false // counted: the current table is already counted
	for _, line := range prose(doc) {
		row := strings.TrimSpace(line.text)
		if !strings.HasPrefix(row, "|") {
			counted = false
			continue
		}
		first := strings.TrimSpace(strings.Split(row, "|")[1])
		if !counted && (strings.HasPrefix(first, "MUST") || strings.HasPrefix(first, "MAY")) {
			tables++
			counted = true
		}
	}
	return tables
}
