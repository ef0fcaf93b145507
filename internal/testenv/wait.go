package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond every 20 ms until it reports done, and fails the test with the
// last state cond described if that takes longer than timeout. Tests wait for
// asynchronous work with it instead of sleeping: it returns as soon as the work is
// done, and a failure says what was still missing.
func WaitFor(tb testing.TB, timeout time.Duration, cond func() (done bool, state string)) {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		done, state := cond()
		if done {
			return
		}
		select {
		case <-deadline.C:
			tb.Fatalf("not done after %s: %s", timeout, state)
		case <-tick.C:
		}
	}
}
