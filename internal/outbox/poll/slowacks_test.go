package poll

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
// round trips of its own (a metadata refresh, the ApiVersions handshake) before the
// produce's: if all had to fit in one publish timeout, each publish would time out in
// turn, drop its connection again, and never end (seen twice in the replica-pause chaos
// scenario, whose acks are slowed for the whole run: PublishTimeouts says how).
func TestRelayKeepsPublishingThroughSlowAcksAfterATimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                                string
		publishTimeout, queryTimeout, lease time.Duration
		// tooSlow is how long answers take in the first stretch, longer than any
		// publish may take; slow, in the second.
		tooSlow, slow time.Duration
	}{{
		// Answers take 0.6 of a publish timeout: a produce alone fits, with room to
		// spare on a loaded machine; a new connection's handshake and a produce do not.
		name:           "room to double",
		publishTimeout: 2 * time.Second, queryTimeout: time.Second, lease: 10 * time.Second,
		tooSlow: 3 * time.Second, slow: 1200 * time.Millisecond,
	}, {
		// The chaos scenarios' settings (relayEnv in internal/chaos) with the acks of
		// replica-pause: a doubled timeout, 6 s, does not fit in the 5 s the lease
		// leaves a publish, so the back-off must stop at 5 s rather than not start.
		name:           "lease shorter than a doubling",
		publishTimeout: 3 * time.Second, queryTimeout: 5 * time.Second, lease: 10 * time.Second,
		tooSlow: 6 * time.Second, slow: 1500 * time.Millisecond,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			proxy := testenv.NewKafkaProxy(t)
			b.cfg.ClientOpts = proxy.ClientOpts()
			b.cfg.Workers = 1
			b.cfg.PublishTimeout, b.cfg.QueryTimeout, b.cfg.Lease = tc.publishTimeout, tc.queryTimeout, tc.lease
			startRelay(t, b.newRelay(t))

			b.insert(t, newMessage(t, "warm-up", 0))
			b.waitAllPublished(t, 1, 15*time.Second)

			// Answers later than any publish may take: the next publish times out on
			// the wire.
			proxy.SlowAnswers(t, tc.tooSlow)
			b.insert(t, newMessage(t, "timed-out", 0))
			testenv.WaitFor(t, 15*time.Second, func() (bool, string) {
				got := b.failures(t, "transport")
				return got > 0, fmt.Sprintf("no publish timed out while answers took %v", tc.tooSlow)
			})

			// Now answers are late, but inside a publish timeout.
			before := b.failures(t, "transport")
			proxy.SlowAnswers(t, tc.slow)
			for i := range 10 {
				b.insert(t, newMessage(t, fmt.Sprintf("slow-%d", i), 0))
			}
			b.waitAllPublished(t, 12, 40*time.Second)
			// Publishing in the end is not enough: without the back-off, the relay gets
			// through only by luck, after dozens of timed-out publishes. With it, at
			// most the publishes already out when the answers sped up time out (usually
			// none).
			if got := b.failures(t, "transport") - before; got > 2 {
				t.Errorf("publishes that timed out once answers took %v: %v, want at most 2", tc.slow, got)
			}
		})
	}
}
