package pgfailover

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/repo"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The pair goes through the scenario's steps, without a load: its primary's
// postmaster SIGKILLed, the standby promoted, the old primary rebuilt as its standby
// and promoted back. The watch must see each step as the servers report it: a window
// with no primary after the kill and one at the fail-back, timelines 1, 2 and 3. The
// pair is the test's own, on free ports; the shared server is never touched.
func TestPairFailsOverAndBack(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	p, err := startPair(ctx, root, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stop(true) })
	origin := time.Now()
	watch := startRoleWatch(ctx, p, origin)
	defer watch.Stop()
	waitFor := func(what string, ok func(tick) bool) {
		t.Helper()
		testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
			last, seen := watch.last()
			return seen && ok(last), "the watch has not seen " + what
		})
	}
	waitFor("node 1 the primary", func(t tick) bool { return t.Nodes[0].Primary && t.Nodes[1].Answered })

	if _, err := p.killPostmaster(ctx, 1); err != nil {
		t.Fatal(err)
	}
	killS := time.Since(origin).Seconds()
	waitFor("node 1 silent", func(t tick) bool { return !t.Nodes[0].Answered })
	for _, verb := range []string{"promote", "rebuild", "promote"} {
		if out, err := p.script(ctx, verb); err != nil {
			t.Fatalf("%s: %v\n%s", verb, err, out)
		}
	}
	waitFor("node 1 the primary again", func(t tick) bool { return t.Nodes[0].Primary })
	ticks := watch.Stop()

	if got := noPrimary(ticks); len(got) != 2 || got[0].StartS > killS || got[0].EndS < killS {
		t.Errorf("windows without a primary: got %s, want two, the first over the kill at %.1f s", listWindows(got), killS)
	}
	before, _ := lastPrimary(ticks, 0, killS)
	promoted, _ := firstPrimary(ticks, 1, killS)
	back, _ := firstPrimary(ticks, 0, promoted.AtS)
	got := []int{before.Nodes[0].Timeline, promoted.Nodes[1].Timeline, back.Nodes[0].Timeline}
	if got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("timelines of the primaries in turn: got %v, want [1 2 3]", got)
	}
}
