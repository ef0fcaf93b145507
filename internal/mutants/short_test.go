package mutants

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/repo"
)

// TestShortNoDedupMutantIsKilled is `make chaos-mutants` in small, run by `make test`:
// the consumer without dedup, built in a scratch copy, must be killed by the short
// default scenario, on the real stack, by the duplicate-effects row (or, since the
// lifecycle, the consumer-applied-order row that refuses the redelivery). It keeps the
// harness honest: if the verifier stopped seeing doubled effects, or a valid run stopped
// redelivering events, this fails. No-dedup is the mutant that dies fast and
// deterministically with the harness as it is: the run stays valid (the relay is
// untouched, so the faults bite and acks are lost), and every redelivered event that
// lands in a later batch is counted twice in the running totals.
func TestShortNoDedupMutantIsKilled(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	all, err := Load(filepath.Join(root, "mutants"))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(all, func(m Mutant) bool { return strings.HasSuffix(m.Name, "-no-dedup") })
	if i < 0 {
		t.Fatal("no *-no-dedup.patch in mutants/")
	}
	m := all[i]
	m.Scenarios = []string{"default"} // its other scenario is slower and not needed here

	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Servers it starts are left running for the next test binary, like testenv does.
	stack := &stack.Native{Root: root, Logger: logger}
	if err := stack.Start(t.Context()); err != nil {
		t.Fatalf("start the native stack: %v", err)
	}
	ports, err := devstack.LoadPorts(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	results, err := Run(t.Context(), Config{
		Root: root, Stack: stack, Ports: ports, Short: true, Payments: 20,
		Logger: logger, Out: t.Output(), Verdicts: t.Output(),
	}, []Mutant{m})
	if err != nil {
		t.Fatal(err)
	}
	res := results[0]
	if res.SuiteError != "" {
		t.Fatalf("suite error: %s", res.SuiteError)
	}
	if res.KilledBy != "default" {
		t.Fatalf("%s: got %+v, want killed by default", m.Name, res.Runs)
	}
	failed := strings.Join(res.Runs[0].FailedChecks, "; ")
	// Since the lifecycle (ADR 0006) the consumer also checks each payment's sequence, so
	// a redelivery the mutant lets through is refused there as out of order and counted
	// (consumer applied order) rather than applied twice (duplicate effects): either row
	// is the redelivery seen, any other row would be the mutant killed for a wrong reason.
	if !strings.Contains(failed, "duplicate effects") && !strings.Contains(failed, "consumer applied order") {
		t.Errorf("failed checks: got %q, want the duplicate effects or the consumer applied order row among them", failed)
	}
}
