package compose

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/repo"
)

// TestComposeFileToAVerdict is `make chaos STACK=compose` without Docker, which our
// machines do not have: it reads deploy/docker-compose.yml, starts our binaries as the
// file's api, api-2 and consumer with exactly the environment the file gives them (the
// file's addresses mapped to the native stack, fresh databases, topic and group), and
// runs the compose mode's harness (Run) against them to a verdict: the short
// default scenario, which must be valid and pass. A variable renamed in the file or in
// the code, a wrong address or a relay that bypasses the proxy fails here, not in a
// student's first compose run.
func TestComposeFileToAVerdict(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	project, err := Load(ctx, filepath.Join(root, stack.ComposeFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := stack.LockRuns(ctx, stack.RunLockPath(), 5*time.Minute)
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	defer unlock()
	ports, err := devstack.LoadPorts(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := (&stack.Native{Root: root, Logger: logger}).Start(ctx); err != nil {
		t.Fatalf("start the native stack: %v", err)
	}
	built, err := stack.Build(ctx, root, t.TempDir(), "./cmd/api", "./cmd/consumer")
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	binaries := map[string]string{}
	for pkg, path := range built {
		binaries[filepath.Base(pkg)] = path
	}

	run := func() *verdict.Report {
		// Kept after the test, as the native runs' are: a failure's first evidence.
		logDir := filepath.Join(root, ".stack", "chaos", devstack.UniqueName("compose-"))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Logf("service logs: %s", logDir)
		services, err := composeNative(project, ports, binaries, logDir)
		if err != nil {
			t.Fatalf("map the compose file onto the native stack: %v", err)
		}
		var out strings.Builder
		reports, err := Run(ctx, harness.Options{Root: root, Ports: ports, Payments: 20, ReportDir: t.TempDir(), Logger: logger, Out: &out},
			Stack{Project: project, View: services.view, Services: services},
			[]string{"default"}, chaos.Scenarios(true))
		t.Log(out.String())
		if err != nil {
			t.Fatalf("compose run: %v", err)
		}
		return reports["default"]
	}
	report := run()
	// As in TestShortDefaultScenario: INVALID advises one rerun; FAIL is never rerun.
	if report.Verdict() == verdict.Invalid {
		t.Logf("first run INVALID, rerun once as its verdict advises: %s", report.Advice())
		report = run()
	}
	for _, c := range report.Checks {
		if !c.OK {
			t.Errorf("%s check %q: got %s, want %s", c.Kind, c.Name, c.Got, c.Want)
		}
	}
	if !report.Valid || !report.Pass {
		t.Errorf("verdict: got %s, want PASS (valid %t, pass %t)", report.Verdict(), report.Valid, report.Pass)
	}
	if report.Stack != stack.ComposeKind || report.APIAccepted != 20 {
		t.Errorf("report: stack %q, %d accepted; want compose, 20", report.Stack, report.APIAccepted)
	}
}
