package poll

import (
	"fmt"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The oldest pending age is read on the database's clock alone. The event's
// occurred-at time is the API host's clock, and the relay runs on yet another host: an
// API host an hour behind would otherwise raise the outage alert for an event written
// a moment ago, and one an hour ahead would hide a real outage for that hour.
func TestOldestPendingAgeIsTheDatabasesClock(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		t.Run(fmt.Sprintf("api host %s", skew), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// The broker is unreachable, so the event stays pending while the monitor
			// reads its age.
			proxy := testenv.NewKafkaProxy(t)
			if err := proxy.Proxy.Disable(); err != nil {
				t.Fatalf("disable proxy: %v", err)
			}
			b.cfg.ClientOpts = proxy.ClientOpts()
			msg := newMessage(t, "skewed", 0)
			msg.OccurredAt = time.Now().Add(skew)
			b.insert(t, msg)
			startRelay(t, b.newRelay(t))

			testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
				got := b.metric(t, "outbox_pending_count")
				return got == 1, fmt.Sprintf("outbox_pending_count %v, want 1", got)
			})
			// Seconds, not an hour either way: the event was written just now.
			if got := b.metric(t, "outbox_oldest_pending_age_seconds"); got < 0 || got > 30 {
				t.Errorf("outbox_oldest_pending_age_seconds = %v for an event written just now by an API host %s off, want 0 to 30", got, skew)
			}
		})
	}
}
