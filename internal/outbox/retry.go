package outbox

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// isRejection reports whether err means the broker refused this record for a reason
// of its own, so that sending the same bytes again cannot succeed. Only these count
// towards the DLQ. Everything else (timeouts, refused connections, leader changes, a
// closed client, an unknown topic, missing authorisation) is about the broker or the
// configuration and would hit every event alike: the relay backs off as a whole and
// keeps the events pending (docs/adr/0005).
//
// franz-go reports a record too large for its own batch limit, and the broker's
// MESSAGE_TOO_LARGE, both as kerr.MessageTooLarge.
func isRejection(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) ||
		errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) ||
		errors.Is(err, kerr.CorruptMessage) ||
		errors.Is(err, kerr.InvalidTimestamp)
}

// backoff is base doubled n times, capped at max, with "equal jitter": a random value
// in [d/2, d], so that many events or replicas failing together do not retry in step.
func backoff(base, max time.Duration, n int) time.Duration {
	d := max
	if n < 32 && base<<n > 0 && base<<n < max {
		d = base << n
	}
	return d/2 + rand.N(d/2+1)
}

// outageBackoff pauses the whole relay after transport failures. Per-event backoff
// would be wrong here: the broker is down for every event alike, and retrying each
// on its own schedule would only hammer it.
type outageBackoff struct {
	base, max time.Duration

	mu       sync.Mutex
	failures int       // consecutive batches that hit a transport failure
	until    time.Time // no worker claims before this
}

// failed records a transport failure and returns the pause it imposed.
func (b *outageBackoff) failed() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := backoff(b.base, b.max, b.failures)
	b.failures++
	b.until = time.Now().Add(d)
	return d
}

// succeeded ends the pause: the broker answered.
func (b *outageBackoff) succeeded() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	b.until = time.Time{}
}

// remaining is how long workers must still wait before claiming.
func (b *outageBackoff) remaining() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Until(b.until)
}

// sleep waits for d, or until ctx ends; it reports whether ctx is still live. A
// d of zero or less returns at once. The relay's loops pause with it instead of
// time.Sleep, so that stopping the relay never waits out a backoff.
func sleep(ctx context.Context, d time.Duration) bool {
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
