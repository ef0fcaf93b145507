// Package backoff is the one retry delay of the service: every loop that waits before
// trying again (the relays' outage pause and per-event retries, the antifraud consumer's batch retries) asks Delay how long, and waits
// with Wait.
//
// It is one function of ours rather than github.com/cenkalti/backoff/v5 because the
// delay must be a pure function of a count: the relay keeps each event's attempts and
// rejections in its row, not in a Go value, so the next delay is computed from the row
// (Delay(base, max, row.attempts)), and a library's stateful BackOff (NextBackOff,
// Reset) would have to be rebuilt from that count at every call. Ten lines of ours say
// the rule outright.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Delay is base doubled n times, capped at max, with "equal jitter": a random value in
// [d/2, d], so that many events or replicas failing together do not retry in step.
// n is how many attempts have failed before this wait (0 for the first retry).
func Delay(base, max time.Duration, n int) time.Duration {
	d := max
	if n >= 0 && n < 32 && base<<n > 0 && base<<n < max {
		d = base << n
	}
	return d/2 + rand.N(d/2+1)
}

// Wait waits for d, or until ctx ends; it reports whether ctx is still live. A d of
// zero or less returns at once. Retry loops wait with it instead of time.Sleep, so
// that stopping them never waits out a backoff.
func Wait(ctx context.Context, d time.Duration) bool {
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	}
	return ctx.Err() == nil
}

// Until waits until t, or until ctx ends, and returns ctx's error if it ended first:
// the wait of a schedule (a fault window, a paced load, a poll of the chaos harness),
// where Wait is the wait of a retry.
func Until(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
