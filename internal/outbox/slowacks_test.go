package outbox

import (
	"fmt"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// A broker that answers, but slowly: every answer takes about half a publish timeout,
// after one stretch in which it took longer than a whole one, so that a publish timed
// out with its records on the wire. The relay must go on publishing: a client that
// cancelled records in flight must get a new producer epoch before it produces again
// (one more round trip), and if that round trip counted against the publish timeout,
// each publish would time out in turn, cancel again, and never end (seen in the
// replica-pause chaos scenario, whose acks are slowed for the whole run).
func TestRelayKeepsPublishingThroughSlowAcksAfterATimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := testenv.NewKafkaProxy(t)
	b.cfg.ClientOpts = proxy.ClientOpts()
	b.cfg.Workers = 1
	b.cfg.PublishTimeout = time.Second
	b.cfg.Lease = 4 * time.Second
	startRelay(t, b.newRelay(t))

	b.insert(t, newMessage(t, "warm-up", 0))
	b.waitAllPublished(t, 1, 15*time.Second)

	// Answers later than a publish timeout: the next publish times out on the wire.
	if _, err := proxy.Proxy.AddToxic("slow", "latency", "downstream", 1, toxiclient.Attributes{"latency": 1500}); err != nil {
		t.Fatalf("add toxic: %v", err)
	}
	b.insert(t, newMessage(t, "timed-out", 0))
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		got := failuresOf(b.metrics, reasonTransport)
		return got > 0, "no publish timed out while answers took 1.5 s"
	})

	// Now answers take 0.6 s: late, but inside a publish timeout.
	if _, err := proxy.Proxy.UpdateToxic("slow", 1, toxiclient.Attributes{"latency": 600}); err != nil {
		t.Fatalf("update toxic: %v", err)
	}
	for i := range 10 {
		b.insert(t, newMessage(t, fmt.Sprintf("slow-%d", i), 0))
	}
	b.waitAllPublished(t, 12, 30*time.Second)
}
