package mutants

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// Config configures a run of the suite.
type Config struct {
	// Root is the repository root: the mutants are applied to copies of it, and its own
	// harness (this checkout's internal/chaos) judges them. Required.
	Root string
	// Stack is the native stack the scenarios run on, already started. Required.
	Stack *stack.Native
	// Ports are the native stack's ports (devstack.LoadPorts). Default
	// devstack.DefaultPorts().
	Ports devstack.Ports
	// Short runs the scenarios with their shorter fault windows (chaos.Scenarios(true)).
	Short bool
	// Payments per scenario run. Default 100, the course's load.
	Payments int
	// All runs every scenario of a mutant; by default its scenarios stop at the first
	// that kills it.
	All bool
	// Keep keeps the databases and topic of runs that did not pass, as evidence. By
	// default the suite drops them: a killed mutant is the expected outcome, and ten of
	// them would litter the shared stack.
	Keep bool
	// LockWait bounds the wait for the machine-wide chaos lock, taken for each scenario
	// run so that other chaos runs can interleave. Default 10 minutes.
	LockWait time.Duration
	// Logger receives progress. Default: discarded.
	Logger *slog.Logger
	// Out receives one line per mutant and per scenario run. Default io.Discard.
	Out io.Writer
	// Verdicts receives the chaos verdict table of every run. Default io.Discard.
	Verdicts io.Writer
}

func (c Config) withDefaults() Config {
	c.Payments = cmp.Or(c.Payments, 100)
	c.Ports = cmp.Or(c.Ports, devstack.DefaultPorts())
	c.LockWait = cmp.Or(c.LockWait, 10*time.Minute)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Verdicts == nil {
		c.Verdicts = io.Discard
	}
	return c
}

// An Outcome is what one scenario did to one mutant.
type Outcome string

// Outcomes. Only Killed counts towards the score.
const (
	// Killed: the scenario's verdict was FAIL.
	Killed Outcome = "killed"
	// Survived: the verdict was PASS or INVALID. INVALID is not a kill: the run
	// proved nothing, and a mentor would be told to rerun it.
	Survived Outcome = "survived"
	// NotRun: an earlier scenario killed the mutant (and Config.All was off), or the
	// patch did not apply or build.
	NotRun Outcome = "not run"
	// Errored: the harness could not run the scenario (a service that would not
	// start, say). Not a kill: the suite cannot tell a crash it caused from a broken
	// stack.
	Errored Outcome = "error"
)

// A ScenarioResult is one scenario run against one mutant.
type ScenarioResult struct {
	Scenario string  `json:"scenario"`
	Outcome  Outcome `json:"outcome"`
	// Verdict is the chaos verdict (PASS, FAIL, INVALID); empty when not run.
	Verdict string `json:"verdict,omitempty"`
	// FailedChecks are the verdict rows that failed, as "kind name: got X, want Y".
	FailedChecks []string `json:"failed_checks,omitempty"`
	Error        string   `json:"error,omitempty"`
	Seconds      float64  `json:"seconds,omitempty"`
}

// A Result is what the suite found out about one mutant.
type Result struct {
	Mutant
	// Runs has one entry per scenario of the mutant, in its order.
	Runs []ScenarioResult `json:"runs"`
	// KilledBy is the first scenario that killed it; empty for a survivor.
	KilledBy string `json:"killed_by,omitempty"`
	// SuiteError says why the mutant could not be tried: its patch no longer applies
	// or no longer builds. It is the suite's bug, not the harness's, and never a kill.
	SuiteError string `json:"suite_error,omitempty"`
}

// Run tries each mutant in turn: a fresh scratch copy, the patch, a build, and its
// scenarios on the native stack. It returns one Result per mutant; the error is only
// for ctx ending.
func Run(ctx context.Context, cfg Config, mutants []Mutant) ([]Result, error) {
	cfg = cfg.withDefaults()
	results := make([]Result, 0, len(mutants))
	for _, m := range mutants {
		fmt.Fprintf(cfg.Out, "== %s: %s\n", m.Name, m.Bug)
		res := tryMutant(ctx, cfg, m)
		if err := ctx.Err(); err != nil {
			return results, fmt.Errorf("mutation suite: %w", err)
		}
		results = append(results, res)
	}
	return results, nil
}

// tryMutant builds m in a scratch copy and runs its scenarios; the copy is removed
// whatever happens.
func tryMutant(ctx context.Context, cfg Config, m Mutant) Result {
	res := Result{Mutant: m}
	bins, scratch, err := Prepare(ctx, cfg.Root, m)
	if scratch != nil {
		defer func() {
			if err := scratch.Remove(); err != nil {
				cfg.Logger.Warn("remove scratch copy", slog.String("mutant", m.Name), slog.Any("err", err))
			}
		}()
	}
	if err != nil {
		res.SuiteError = err.Error()
		fmt.Fprintf(cfg.Out, "   SUITE ERROR, not counted as killed: %v\n", err)
		for _, name := range m.Scenarios {
			res.Runs = append(res.Runs, ScenarioResult{Scenario: name, Outcome: NotRun})
		}
		return res
	}
	for _, name := range m.Scenarios {
		if res.KilledBy != "" && !cfg.All {
			res.Runs = append(res.Runs, ScenarioResult{Scenario: name, Outcome: NotRun})
			continue
		}
		run := runScenario(ctx, cfg, chaos.Scenarios(cfg.Short)[name], m, bins) // fresh: a scenario keeps what its run saw
		fmt.Fprintf(cfg.Out, "   %-15s %s\n", name, describe(run))
		if run.Outcome == Killed && res.KilledBy == "" {
			res.KilledBy = name
		}
		res.Runs = append(res.Runs, run)
	}
	return res
}

// Prepare makes a scratch copy of root, applies m's patch and builds the services. The
// copy it returns, even with an error, must be removed by the caller.
func Prepare(ctx context.Context, root string, m Mutant) (map[string]string, *Scratch, error) {
	scratch, err := NewScratch(ctx, root)
	if err != nil {
		return nil, nil, err
	}
	if err := scratch.Apply(ctx, m.Path); err != nil {
		return nil, scratch, fmt.Errorf("patch no longer applies: %w", err)
	}
	bins, err := scratch.Build(ctx)
	if err != nil {
		return nil, scratch, fmt.Errorf("mutant no longer builds: %w", err)
	}
	return bins, scratch, nil
}

// runScenario runs one scenario against the mutant's binaries with this checkout's
// harness, under the machine-wide chaos lock, and judges the outcome by the verdict.
func runScenario(ctx context.Context, cfg Config, sc harness.Scenario, m Mutant, bins map[string]string) ScenarioResult {
	res := ScenarioResult{Scenario: sc.Name}
	unlock, err := stack.LockRuns(ctx, stack.RunLockPath(), cfg.LockWait)
	if err != nil {
		res.Outcome, res.Error = Errored, err.Error()
		return res
	}
	defer unlock()
	start := time.Now()
	report, err := harness.RunScenario(ctx, harness.Options{
		Root: cfg.Root, Payments: cfg.Payments, Binaries: bins, Ports: cfg.Ports, RelayMode: m.RelayMode,
		// Reports go under the ignored .stack/, not over the tracked reports/.
		ReportDir: filepath.Join(cfg.Root, ".stack", "mutants", m.Name),
		Logger:    cfg.Logger.With(slog.String("mutant", m.Name)),
		Out:       cfg.Verdicts,
	}, cfg.Stack, sc)
	res.Seconds = time.Since(start).Round(time.Second).Seconds()
	if err != nil {
		res.Outcome, res.Error = Errored, err.Error()
		return res
	}
	res.Verdict = report.Verdict()
	res.Outcome = Survived
	if res.Verdict == "FAIL" {
		res.Outcome = Killed
	}
	for _, c := range report.Checks {
		if !c.OK {
			res.FailedChecks = append(res.FailedChecks, fmt.Sprintf("%s %s: got %s, want %s", c.Kind, c.Name, c.Got, c.Want))
		}
	}
	if !report.Pass && !cfg.Keep {
		dropRun(ctx, cfg, report)
	}
	return res
}

// dropRun removes the databases and topic that RunScenario keeps for a run that did not
// pass. Its services are stopped by then: RunScenario stops them before it returns.
func dropRun(ctx context.Context, cfg Config, report *verdict.Report) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, db := range []string{report.PaymentsDatabase, report.ConsumerDatabase} {
		if err := devstack.DropDatabase(ctx, cfg.Ports.AdminURL(), db); err != nil {
			cfg.Logger.Warn("drop a mutant run's database", slog.Any("err", err))
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Ports.DirectBroker()))
	if err != nil {
		cfg.Logger.Warn("drop a mutant run's topic", slog.Any("err", err))
		return
	}
	defer cl.Close()
	if err := devstack.DeleteTopic(ctx, kadm.NewClient(cl), report.Topic); err != nil {
		cfg.Logger.Warn("drop a mutant run's topic", slog.Any("err", err))
	}
}

// describe is one scenario run in a line: the outcome and why.
func describe(r ScenarioResult) string {
	switch {
	case r.Outcome == Errored:
		return "ERROR (not a kill): " + r.Error
	case len(r.FailedChecks) == 0:
		return fmt.Sprintf("%s (%s in %.0fs)", r.Outcome, r.Verdict, r.Seconds)
	default:
		return fmt.Sprintf("%s (%s in %.0fs; %s)", r.Outcome, r.Verdict, r.Seconds, strings.Join(r.FailedChecks, "; "))
	}
}
