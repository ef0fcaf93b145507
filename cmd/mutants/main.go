// Command mutants is `make chaos-mutants`: it applies each bug of mutants/ to a scratch
// copy of this service, builds it, and runs it against the chaos scenarios that should
// catch it, with this checkout's harness. It prints a table bug × scenario → killed /
// survived / not run, and writes reports/mutants.json with the mutation score.
//
//	go run ./cmd/mutants [-mutant 06-no-dedup,09] [-all] [-short] [-payments N] [-keep] [-check]
//
// A mutant is killed when a scenario's verdict is FAIL; INVALID is not a kill. It exits 1
// when a patch no longer applies or builds (the suite's own bug), never because a mutant
// survived: survivors are listed with what would catch them. It runs on the native stack
// only, whether Docker runs or not (STACK=compose is refused: the harness starts each
// mutant's processes itself).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/mutants"
	"github.com/dscourse/payments-outbox/internal/repo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

// errSuiteBroken is returned when a patch no longer applies or builds.
var errSuiteBroken = errors.New("the mutation suite itself is broken (see SUITE ERROR above)")

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("mutants", flag.ContinueOnError)
	only := flags.String("mutant", "", "comma-separated mutants to try, by name or number prefix (default: all of mutants/)")
	all := flags.Bool("all", false, "run every scenario of a mutant, not only those up to the first kill")
	short := flags.Bool("short", false, "shorter fault windows (as the CI test runs them)")
	payments := flags.Int("payments", 100, "payments per scenario run")
	keep := flags.Bool("keep", false, "keep the databases and topic of runs that did not pass")
	check := flags.Bool("check", false, "only check that every patch applies and builds; run no scenario")
	verbose := flags.Bool("v", false, "print each run's chaos verdict table")
	out := flags.String("out", "", "JSON report (default <repo>/reports/mutants.json)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	root, err := repo.Root()
	if err != nil {
		return err
	}
	available, err := mutants.Load(filepath.Join(root, "mutants"))
	if err != nil {
		return err
	}
	selected, err := selectMutants(available, *only)
	if err != nil {
		return err
	}
	if *check {
		return checkPatches(ctx, root, selected, stdout)
	}

	stackKind, reason, err := stack.Choose(getenv)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "stack: %s (%s)\n", stackKind, reason)
	if stackKind != stack.NativeKind {
		return errors.New("the mutants run on the native stack only: each is a patched copy of our services that the harness builds and starts itself, which it cannot do in Docker; unset STACK")
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	native := &stack.Native{Root: root, Logger: logger}
	if err := native.Start(ctx); err != nil {
		return err
	}
	// Servers this command started are stopped at the end; servers that were already
	// running are shared with other work and left alone.
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := native.StopStarted(stopCtx); err != nil {
			logger.Warn("stop the native stack", slog.Any("err", err))
		}
	}()

	ports, err := devstack.LoadPorts(os.Getenv)
	if err != nil {
		return err
	}
	cfg := mutants.Config{Root: root, Stack: native, Ports: ports, Short: *short, Payments: *payments, All: *all, Keep: *keep, Logger: logger, Out: stdout}
	if *verbose {
		cfg.Verdicts = stdout
	}
	results, err := mutants.Run(ctx, cfg, selected)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	mutants.PrintTable(stdout, results)
	path := *out
	if path == "" {
		path = filepath.Join(root, "reports", "mutants.json")
	}
	if err := mutants.WriteReport(path, root, cfg, results); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "report: %s\n", path)
	if mutants.ScoreOf(results).SuiteErrors > 0 {
		return errSuiteBroken
	}
	return nil
}

// selectMutants keeps the mutants named in only: a full name, or a prefix such as "06".
func selectMutants(all []mutants.Mutant, only string) ([]mutants.Mutant, error) {
	if only == "" {
		return all, nil
	}
	var selected []mutants.Mutant
	for _, want := range strings.Split(only, ",") {
		want = strings.TrimSpace(want)
		found := false
		for _, m := range all {
			if strings.HasPrefix(m.Name, want) {
				selected = append(selected, m)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("no mutant matches %q", want)
		}
	}
	return selected, nil
}

// checkPatches applies and builds each mutant in a scratch copy, and nothing more.
func checkPatches(ctx context.Context, root string, selected []mutants.Mutant, stdout io.Writer) error {
	broken := false
	for _, m := range selected {
		_, scratch, err := mutants.Prepare(ctx, root, m)
		if scratch != nil {
			if rmErr := scratch.Remove(); rmErr != nil {
				err = errors.Join(err, rmErr)
			}
		}
		if err != nil {
			broken = true
			fmt.Fprintf(stdout, "%s: SUITE ERROR: %v\n", m.Name, err)
			continue
		}
		fmt.Fprintf(stdout, "%s: applies and builds\n", m.Name)
	}
	if broken {
		return errSuiteBroken
	}
	return nil
}
