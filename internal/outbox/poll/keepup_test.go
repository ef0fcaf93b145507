package poll

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The rule of waitForWork, on its own: a commit's nudge is left to a worker in a
// streak whose latest claim is young and was not full, and taken once that streak is
// over, full, or old; so is a poll. A worker whose streak ends learns whether a commit
// was left to it during its latest claim.
func TestIdleWorkerLeavesACommitToAWorkerKeepingUp(t *testing.T) {
	t.Parallel()
	r := &Relay{wake: make(chan wakeSource, 1)}
	// The busy count runs on the test's clock, which moves only when the test says: a
	// streak's age is what the test makes it, however slowly the test runs.
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r.busy.now = func() time.Time { return clock }
	tick := func() { clock = clock.Add(time.Millisecond) }
	poll := make(chan time.Time, 1)
	// A wake-up that is taken is taken at once; the timeout bounds only the wait that
	// shows one is left.
	waitFor := func(t *testing.T, wantWoken bool, what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		source, woken := r.waitForWork(ctx, poll, false)
		if woken != wantWoken {
			t.Fatalf("%s: woken %v (by %q), want %v", what, woken, source, wantWoken)
		}
		tick()
	}
	var busy streak // the other worker's
	claim := func(full bool) {
		r.busy.claiming(&busy)
		tick()
		r.busy.found(&busy, full)
		tick()
	}

	claim(false)
	r.nudge(wokenByNudge)
	waitFor(t, false, "a nudge while another worker is in a streak that keeps up")
	r.nudge(wokenByIdlePoll)
	waitFor(t, false, "an idle poll while another worker keeps up")
	poll <- time.Now()
	waitFor(t, false, "a poll while another worker keeps up")

	r.busy.claiming(&busy) // a claim that finds nothing
	tick()
	if r.busy.stop(&busy) {
		t.Errorf("stop reported a commit left during a claim when none was")
	}
	r.nudge(wokenByNudge)
	waitFor(t, true, "a nudge once that streak is over")
	poll <- time.Now()
	waitFor(t, true, "a poll once that streak is over")

	claim(false)
	r.busy.claiming(&busy) // its next claim, which will find nothing
	tick()
	r.nudge(wokenByNudge)
	waitFor(t, false, "a nudge during the next claim of a worker in a streak")
	if !r.busy.stop(&busy) {
		t.Errorf("stop did not report the commit left during the worker's latest claim: it would wait for a poll")
	}

	claim(true)
	r.nudge(wokenByNudge)
	waitFor(t, true, "a nudge while another worker is in a full batch")
	r.busy.stop(&busy)

	claim(false)
	clock = clock.Add(joinAfter)
	r.nudge(wokenByNudge)
	waitFor(t, true, "a nudge while another worker's latest claim is joinAfter old")
}

// A commit left to a busy worker is never lost: with both polls an hour apart, each event
// committed while another worker is in a streak is published by that worker's next
// claim. Each round commits one event, then a second a moment later, from while the
// first one's publish (4 ms) is under way to while its worker makes the claim that
// finds nothing and ends its streak, and nothing more until both are out.
func TestNoCommitLeftToABusyWorkerIsLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Workers = 4
	b.cfg.PollInterval = time.Hour
	b.cfg.IdlePollInterval = time.Hour
	r := b.newRelay(t)
	// A fake, not kfake: the test reads how many calls overlapped and how many records
	// each carried, which the fake counts.
	broker := &fakeProducer{delay: 4 * time.Millisecond}
	startWorkers(t, r, broker, broker)

	const rounds = 40
	for i := range rounds {
		b.insert(t, newMessage(t, fmt.Sprintf("first-%d", i), 0))
		r.Notify()
		time.Sleep(time.Duration(2+i%10) * time.Millisecond)
		b.insert(t, newMessage(t, fmt.Sprintf("second-%d", i), 0))
		r.Notify()
		testenv.WaitFor(t, 5*time.Second, func() (bool, string) {
			got := b.count(t, `SELECT count(*) FROM outbox_published`)
			return got == 2*(i+1), fmt.Sprintf("round %d: published %d of %d with no poll: a commit left to a busy worker was lost", i, got, 2*(i+1))
		})
	}
}
