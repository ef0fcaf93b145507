package timeline

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The sample's page in docs/sample is the page this package draws of the sample's JSON
// today: a change of the pages shows in the repository's sample too, or this fails
// and says how to redraw it.
func TestSamplePageIsCurrent(t *testing.T) {
	t.Parallel()
	want, err := renderPage(recorded(t, "default"))
	if err != nil {
		t.Fatalf("Page: %v", err)
	}
	path := strings.TrimSuffix(samplePath, ".json") + ".html"
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the sample's page: %v (go run ./cmd/chaos html -dir docs/sample draws it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not the page of its JSON as drawn today: redraw it with go run ./cmd/chaos html -dir docs/sample (make chaos-sample also runs it)", filepath.Clean(path))
	}
}
