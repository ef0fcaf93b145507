package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository's root, relative to this package's directory (go test runs
// in it).
const repoRoot = ".."

// markdownFiles returns README.md and every .md file under docs/, as paths relative to the
// repository's root with forward slashes.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(repoRoot, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list markdown files: %v", err)
	}
	return files
}

// readRepoFile reads a file given relative to the repository's root.
func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(data)
}

// wordCount counts words as `wc -w` does: runs of characters between white space.
func wordCount(text string) int { return len(strings.Fields(text)) }

// A line of a markdown file outside fenced code blocks, with its inline code spans
// replaced by a placeholder, so that neither a heading nor a link is read inside code.
type proseLine struct {
	number int // 1-based
	text   string
}

var (
	fence = regexp.MustCompile("^\\s*(```|~~~)")
	// codeSpan is an inline code span of one or two backticks.
	codeSpan = regexp.MustCompile("``[^`]*``|`[^`\n]*`")
)

// prose returns the lines of a markdown document that are not in fenced code blocks,
// each with its code spans replaced by the word "code".
func prose(doc string) []proseLine {
	var lines []proseLine
	inFence := false
	for i, line := range strings.Split(doc, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		lines = append(lines, proseLine{number: i + 1, text: codeSpan.ReplaceAllString(line, "code")})
	}
	return lines
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	// htmlAnchor is an explicit anchor: <a id="x"> or <a name="x">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	// inlineLink is [text](target); the text may wrap, but not across a blank line.
	inlineLink = regexp.MustCompile(`\[((?:[^\]\n]|\n[^\]\n])*)\]\(([^)\s]*)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
)

// anchors returns every anchor a document's headings get on GitHub, plus its explicit
// HTML anchors. GitHub renders a heading's text, lower-cases it, drops every character
// that is not a letter, a mark, a digit, a connector (such as _), a space or a hyphen,
// turns each space into a hyphen, and suffixes -1, -2, ... to repeats.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	// Headings are read with their code spans intact: GitHub keeps a code span's text.
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := headingSlug(m[1])
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// headingSlug is GitHub's anchor for a heading's markdown text.
func headingSlug(text string) string {
	text = inlineLink.ReplaceAllString(text, "$1") // a link renders as its text
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
