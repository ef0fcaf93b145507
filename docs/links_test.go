package docs

import (
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// Every relative link of README.md and docs/**/*.md points at a file or directory of the
// repository, and every #anchor at a heading (or an explicit HTML anchor) of its target,
// by GitHub's anchor rules (headingSlug). Links to the web are not followed.
func TestRelativeLinksAndAnchorsResolve(t *testing.T) {
	t.Parallel()
	docAnchors := map[string]map[string]bool{} // by file, read once
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := docAnchors[rel]; ok {
			return a
		}
		a := anchors(readRepoFile(t, rel))
		docAnchors[rel] = a
		return a
	}
	links := 0
	for _, file := range markdownFiles(t) {
		// A link's text may wrap onto the next line, so links are read from the whole
		// prose, and each is reported at the line its target is on.
		var b strings.Builder
		last := 0
		for _, line := range prose(readRepoFile(t, file)) {
			b.WriteString(strings.Repeat("\n", line.number-last))
			b.WriteString(line.text)
			last = line.number
		}
		text := b.String()
		for _, m := range inlineLink.FindAllStringSubmatchIndex(text, -1) {
			target := text[m[4]:m[5]]
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			if problem := resolveLink(file, target, anchorsOf); problem != "" {
				t.Errorf("%s:%d: link %q: %s", file, strings.Count(text[:m[4]], "\n"), target, problem)
			}
		}
	}
	if links == 0 {
		t.Fatal("no relative link found: the link parser reads nothing")
	}
}

// resolveLink says what is wrong with a relative link of file, or "" when it resolves.
func resolveLink(file, target string, anchorsOf func(string) map[string]bool) string {
	rawPath, anchor, _ := strings.Cut(target, "#")
	p, err := url.PathUnescape(rawPath)
	if err != nil {
		return "not a valid path: " + err.Error()
	}
	rel := file
	if p != "" {
		if strings.HasPrefix(p, "/") {
			return "absolute path: GitHub resolves it against the host, not the repository"
		}
		rel = path.Clean(path.Join(path.Dir(file), p))
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(rel))); err != nil {
			return "no such file or directory: " + rel
		}
	}
	if anchor == "" || !strings.HasSuffix(rel, ".md") {
		return "" // an anchor into code (#L10) is GitHub's line link, not a heading
	}
	if !anchorsOf(rel)[anchor] {
		return "no heading of " + rel + " has the anchor #" + anchor
	}
	return ""
}
