package timeline

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// screenshots, when set, is a directory where the Chromium test also saves its PNGs
// under stable names, the README's pictures:
//
//	go test ./internal/chaos/timeline -run Chromium -screenshots ../../../docs/images
var screenshots = flag.String("screenshots", "", "also save the screenshots in this directory (the README's pictures)")

// chromiumPath finds Debian's chromium, which scripts/setup.sh installs.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skip("chromium is not installed: run make setup (scripts/setup.sh installs Debian's chromium), which make test runs first")
	return ""
}

// A browser is one headless Chromium for a test, with every console error and
// uncaught exception of the pages it opens recorded.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// newBrowser starts Chromium on a fresh profile. The flags keep it off the network:
// without them it calls Google (component updates, sync, field trials) and, on a
// closed network, waits for those calls.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// As wide as the page (70rem) and its margins: the screenshots carry no empty sides.
		chromedp.WindowSize(1160, 900),
	)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	ctx, cancelBrowser := chromedp.NewContext(ctx)
	b := &browser{ctx: ctx}
	// Console subscribes at once: every message of every page opened later is read,
	// by this goroutine, until the context ends.
	messages := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				if ctx.Err() == nil {
					b.record("reading the console: %v", err)
				}
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.record("%s at %s:%d: %s", m.Type, m.URL, m.Line, m.Text)
			}
		}
	}()
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		cancel()
		<-done
	})
	return b
}

func (b *browser) record(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, fmt.Sprintf(format, args...))
}

// consoleErrors returns the errors recorded since the last call, and forgets them, so
// that each page is judged by its own.
func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	errs := b.errors
	b.errors = nil
	return errs
}

// rendered is what the page shows, as the browser laid it out.
type rendered struct {
	// Charts counts the chart sections whose SVG has a visible size, lines and
	// labels: a chart the browser could not parse has none.
	Charts, ChartSections int
	// BrokenLinks lists the links within the page to an element it lacks.
	BrokenLinks []string
}

// inspect is run in the page: it reports what rendered.
const inspect = `(() => {
  const sections = [...document.querySelectorAll("section.chart")];
  const drawn = sections.filter(s => {
    const svg = s.querySelector("svg");
    if (!svg) return false;
    const box = svg.getBoundingClientRect();
    return box.width > 200 && box.height > 100 && svg.querySelectorAll("path").length > 10 && svg.querySelectorAll("text").length > 3;
  });
  const broken = [...document.querySelectorAll('a[href^="#"]')]
    .map(a => a.getAttribute("href").slice(1))
    .filter(id => !document.getElementById(id));
  return {Charts: drawn.length, ChartSections: sections.length, BrokenLinks: broken};
})()`

// open loads a page from disk and waits until it is laid out.
func (b *browser) open(t *testing.T, path string) rendered {
	t.Helper()
	err := chromedp.Do(b.ctx, chromedp.Navigate("file://"+path), chromedp.WaitReady("body"))
	if err != nil {
		t.Fatalf("open %s in chromium: %v", path, err)
	}
	got, err := chromedp.Run(b.ctx, chromedp.Evaluate[rendered](inspect))
	if err != nil {
		t.Fatalf("open %s in chromium: %v", path, err)
	}
	return got
}

// screenshot saves the whole page as a PNG in the test's directory and, with
// -screenshots, under name in that directory.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) < 10_000 {
		t.Errorf("screenshot of %d bytes: the page looks blank", len(png))
	}
	dirs := []string{t.TempDir()}
	if *screenshots != "" {
		dirs = append(dirs, *screenshots)
	}
	for _, dir := range dirs {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatalf("save screenshot: %v", err)
		}
		t.Logf("screenshot: %s (%d KB)", path, len(png)/1024)
	}
}

// The pages of recorded runs, opened in headless Chromium: every chart is drawn, the
// verdict rows' links land on a chart, nothing is logged as an error, and the page
// photographs as something.
func TestChromiumRendersTheReports(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	dir := t.TempDir()
	outbox, dual := recorded(t, "default"), recorded(t, "dual-write")
	var pages []string
	for _, r := range []*verdict.Report{outbox, dual} {
		path, err := WritePage(dir, r)
		if err != nil {
			t.Fatalf("WritePage: %v", err)
		}
		pages = append(pages, path)
	}
	index, err := WriteIndex(dir, []*verdict.Report{outbox, dual})
	if err != nil {
		t.Fatalf("WriteIndex: %v", err)
	}

	for _, tt := range []struct {
		path, screenshot string
		wantCharts       int
	}{
		{pages[0], "timeline-default.png", len(charts(outbox))},
		{pages[1], "timeline-dual-write.png", len(charts(dual))},
		{index, "timeline-index.png", 4 * 2}, // the lesson: four rows of two
	} {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			got := b.open(t, tt.path)
			if got.ChartSections != tt.wantCharts || got.Charts != tt.wantCharts {
				t.Errorf("%d chart sections, %d of them drawn; want %d drawn", got.ChartSections, got.Charts, tt.wantCharts)
			}
			if len(got.BrokenLinks) > 0 {
				t.Errorf("links to elements the page lacks: %v", got.BrokenLinks)
			}
			if errs := b.consoleErrors(); len(errs) > 0 {
				t.Errorf("console errors: %v", errs)
			}
			b.screenshot(t, tt.screenshot)
		})
	}
}
