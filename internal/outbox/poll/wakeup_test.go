package poll

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// An event committed by another process (another API replica, here the test itself)
// comes with no nudge: the relay's idle poll finds it. With the workers' own polls an
// hour apart, only the idle poll can have woken the worker that claimed it, and
// nothing called Notify. One worker: its first claim (a poll) is over once it has
// published the warm-up, where a second worker starting late on a busy machine could
// make its first claim after the commit below and find it.
func TestAnotherProcessesCommitIsClaimedByTheIdlePoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Workers = 1
	b.cfg.PollInterval = time.Hour
	b.cfg.IdlePollInterval = 20 * time.Millisecond
	r := b.newRelay(t)
	startRelay(t, r)

	// The workers' first claims, at their start, count as polls: let them pass, and
	// let the worker that publishes the warm-up end its streak.
	b.insert(t, newMessage(t, "warm-up", 0))
	b.waitAllPublished(t, 1, 15*time.Second)
	testenv.WaitFor(t, 5*time.Second, func() (bool, string) {
		r.busy.mu.Lock()
		defer r.busy.mu.Unlock()
		return r.busy.n == 0, fmt.Sprintf("%d workers still in a streak", r.busy.n)
	})
	claims := func(source wakeSource) float64 {
		return testutil.ToFloat64(b.metrics.claims.WithLabelValues(string(source)))
	}
	idle, polled := claims(wokenByIdlePoll), claims(wokenByPoll)

	committed := time.Now()
	b.insert(t, newMessage(t, "from-another-replica", 0))
	b.waitAllPublished(t, 2, 15*time.Second)
	if waited := time.Since(committed); waited > 2*time.Second {
		t.Errorf("published %v after its commit, want about one idle poll (%v)", waited, b.cfg.IdlePollInterval)
	}
	if got := claims(wokenByIdlePoll) - idle; got != 1 {
		t.Errorf("claims woken by the idle poll: %v, want 1", got)
	}
	if got := claims(wokenByPoll) - polled; got != 0 {
		t.Errorf("claims woken by a worker's poll: %v, want 0 (they are an hour apart)", got)
	}
	if got := claims(wokenByNudge); got != 0 {
		t.Errorf("claims woken by a nudge: %v, want 0 (nothing called Notify)", got)
	}
}

// A commit takes no lock shared by every committing transaction: the outbox has no
// trigger (a NOTIFY in one serialised every commit behind the notification queue's
// lock, docs/bench.md).
func TestOutboxInsertFiresNoTrigger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if n := b.count(t, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'outbox_events'::regclass AND NOT tgisinternal`); n != 0 {
		t.Errorf("triggers on outbox_events: %d, want 0", n)
	}
}
