package outbox

import (
	"fmt"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// A broker that answers, but slowly: every answer takes more than half a publish
// timeout, after one stretch in which it took longer than a whole one, so that a
// publish timed out with its records on the wire. The relay must go on publishing. A
// client that cancelled records in flight drops their connection, and a new one costs
// a round trip of its own (the ApiVersions handshake) before the produce's: if both
// had to fit in one publish timeout, each publish would time out in turn, drop its
// connection again, and never end (seen in the replica-pause chaos scenario, whose acks
// are slowed for the whole run).
func TestRelayKeepsPublishingThroughSlowAcksAfterATimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := testenv.NewKafkaProxy(t)
	b.cfg.ClientOpts = proxy.ClientOpts()
	b.cfg.Workers = 1
	// In the second stretch answers take 0.6 of a publish timeout: a produce alone fits,
	// with room to spare on a loaded machine; a new connection's handshake and a
	// produce do not.
	b.cfg.PublishTimeout = 2 * time.Second
	b.cfg.Lease = 10 * time.Second
	startRelay(t, b.newRelay(t))

	b.insert(t, newMessage(t, "warm-up", 0))
	b.waitAllPublished(t, 1, 15*time.Second)

	// Answers later than a publish timeout: the next publish times out on the wire.
	proxy.SlowAnswers(t, 3*time.Second)
	b.insert(t, newMessage(t, "timed-out", 0))
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		got := failuresOf(b.metrics, reasonTransport)
		return got > 0, "no publish timed out while answers took 3 s"
	})

	// Now answers take 1.2 s: late, but inside a publish timeout.
	before := failuresOf(b.metrics, reasonTransport)
	proxy.SlowAnswers(t, 1200*time.Millisecond)
	for i := range 10 {
		b.insert(t, newMessage(t, fmt.Sprintf("slow-%d", i), 0))
	}
	b.waitAllPublished(t, 12, 40*time.Second)
	// Publishing in the end is not enough: without the back-off, the relay got through
	// only by luck, after dozens of timed-out publishes. With it, at most the publishes
	// already out when the answers sped up time out (none, in the runs we made).
	if got := failuresOf(b.metrics, reasonTransport) - before; got > 2 {
		t.Errorf("publishes that timed out once answers took 1.2 s: %v, want at most 2", got)
	}
}
