package outbox

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The rule of waitForWork, on its own: a commit's nudge is left to a worker in a young
// batch that was not full, and taken once that batch is over, full, or old; a poll is
// always taken.
func TestIdleWorkerLeavesACommitToAWorkerKeepingUp(t *testing.T) {
	t.Parallel()
	r := &Relay{wake: make(chan wakeSource, 1)}
	poll := make(chan time.Time, 1)
	// Each wait is shorter than joinAfter, and each check starts a batch of its own, so
	// that the batch is young when the nudge comes.
	waitFor := func(t *testing.T, wantWoken bool, what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), joinAfter/2)
		defer cancel()
		source, woken := r.waitForWork(ctx, poll, false)
		if woken != wantWoken {
			t.Fatalf("%s: woken %v (by %q), want %v", what, woken, source, wantWoken)
		}
	}

	r.busy.started(false)
	r.nudge(wokenByNudge)
	waitFor(t, false, "a nudge while another worker is in a young batch that was not full")
	r.busy.ended()
	r.busy.started(false)
	r.nudge(wokenByNotify)
	waitFor(t, false, "a NOTIFY while another worker keeps up")
	r.busy.ended()
	r.busy.started(false)
	poll <- time.Now()
	waitFor(t, true, "a poll while another worker keeps up")

	r.busy.ended()
	r.nudge(wokenByNudge)
	waitFor(t, true, "a nudge once that batch is over")

	r.busy.started(true)
	r.nudge(wokenByNudge)
	waitFor(t, true, "a nudge while another worker is in a full batch")
	r.busy.ended()

	r.busy.started(false)
	time.Sleep(2 * joinAfter)
	r.nudge(wokenByNudge)
	waitFor(t, true, "a nudge while another worker's batch has gone on for longer than joinAfter")
}

// A commit left to a busy worker is never lost: with polls an hour apart, each event
// committed while another worker publishes is published by that worker's next claim.
// Each round commits one event, then a second while the first one's publish (10 ms)
// is under way, and nothing more until both are out.
func TestNoCommitLeftToABusyWorkerIsLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Workers = 4
	b.cfg.PollInterval = time.Hour
	r := b.newRelay(t)
	broker := &fakeProducer{delay: 10 * time.Millisecond}
	startWorkers(t, r, broker, broker)

	const rounds = 10
	for i := range rounds {
		b.insert(t, newMessage(t, fmt.Sprintf("first-%d", i), 0))
		r.Notify()
		time.Sleep(4 * time.Millisecond)
		b.insert(t, newMessage(t, fmt.Sprintf("second-%d", i), 0))
		r.Notify()
		testenv.WaitFor(t, 5*time.Second, func() (bool, string) {
			got := b.count(t, `SELECT count(*) FROM outbox_published`)
			return got == 2*(i+1), fmt.Sprintf("round %d: published %d of %d with no poll: a commit left to a busy worker was lost", i, got, 2*(i+1))
		})
	}
}
