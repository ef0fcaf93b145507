package cdc

import (
	"fmt"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The polling relay's TestRelayKeepsPublishingThroughSlowAcksAfterATimeout, for the
// stream: a broker that answers in more than half a publish timeout, after a stretch in
// which it answered later than a whole one. A publish that times out with its records
// on the wire drops its connection, so the next needs the new connection's handshake
// and its produce, two round trips: within one publish timeout each retry would time
// out in turn, and the stream would never move on.
func TestStreamKeepsPublishingThroughSlowAcksAfterATimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := testenv.NewKafkaProxy(t)
	b.cfg.ClientOpts = proxy.ClientOpts()
	b.cfg.PublishTimeout = 2 * time.Second
	relay := b.start(t)
	b.insert(t, "warm-up", 1)
	b.waitPublished(t, 1, 90*time.Second)

	proxy.SlowAnswers(t, 3*time.Second)
	b.insert(t, "timed-out", 1)
	testenv.WaitFor(t, 20*time.Second, func() (bool, string) {
		got := relay.metric(t, "outbox_publish_failures_total", "transport")
		return got > 0, fmt.Sprintf("transport failures %v while answers took 3 s, want > 0", got)
	})
	proxy.SlowAnswers(t, 1200*time.Millisecond)
	b.insert(t, "slow", 10)
	b.waitPublished(t, 12, 40*time.Second)
}
