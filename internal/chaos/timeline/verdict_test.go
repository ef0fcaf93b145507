package timeline

import (
	"regexp"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// The dual write passes when it shows the loss it exists to show: its badge names the
// loss as the lesson, never a plain PASS, on its page and in the index; a dual write
// that lost nothing fails plainly.
func TestDualWriteBadgeNamesTheLesson(t *testing.T) {
	t.Parallel()
	outbox, dual := recorded(t, "default"), recorded(t, "dual-write")
	if dual.Outcome != verdict.Pass || dual.Lost == 0 {
		t.Fatalf("the recorded dual-write run is %s with %d lost: want a PASS that lost events", dual.Outcome, dual.Lost)
	}
	page, err := renderPage(dual)
	if err != nil {
		t.Fatalf("Page: %v", err)
	}
	index, err := renderIndex([]*verdict.Report{outbox, dual})
	if err != nil {
		t.Fatalf("Index: %v", err)
	}
	badgeRE := regexp.MustCompile(`<span class="verdict ([A-Z]+)"[^>]*>([^<]*)</span>`)
	for name, html := range map[string][]byte{"page": page, "index": index} {
		for _, m := range badgeRE.FindAllStringSubmatch(string(html), -1) {
			if strings.Contains(m[2], "lost") && (m[1] != lessonClass || !strings.Contains(m[2], "expected lesson")) {
				t.Errorf("%s: badge %q of class %s, want the lesson's", name, m[2], m[1])
			}
		}
		if !strings.Contains(string(html), `<span class="verdict LESSON"`) {
			t.Errorf("%s: no lesson badge", name)
		}
	}
	if got := badgeOf(dual).Text; got == verdict.Pass {
		t.Errorf("the dual write's badge reads %q", got)
	}
	if got := badgeOf(outbox); got.Class != verdict.Pass || got.Text != verdict.Pass {
		t.Errorf("the outbox's badge is %+v, want a plain PASS", got)
	}
	failed := *dual
	failed.Outcome, failed.Lost = verdict.Fail, 0
	if got := badgeOf(&failed); got.Class != verdict.Fail || got.Text != verdict.Fail {
		t.Errorf("a dual write that lost nothing has the badge %+v, want a plain FAIL", got)
	}
}
