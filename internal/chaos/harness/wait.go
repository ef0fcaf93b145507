package harness

import (
	"context"
	"math/rand/v2"
	"time"
)

// WaitUntil waits for t or ctx, whichever comes first.
func WaitUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// Between draws a duration uniformly from [r[0], r[1]).
func Between(r [2]time.Duration) time.Duration {
	if r[1] <= r[0] {
		return r[0]
	}
	return r[0] + rand.N(r[1]-r[0])
}
