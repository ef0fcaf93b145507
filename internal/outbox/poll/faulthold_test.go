package poll

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The FaultHoldBeforeMark knob makes a late mark on purpose: the held batch outlives its
// lease, the database ends its transaction, its mark fails, and another worker publishes
// the acknowledged event again. Nothing is marked by the late owner.
func TestHeldBatchLosesItsLeaseAndIsPublishedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.FaultHoldBeforeMark = b.cfg.Lease + time.Second
	msg := newMessage(t, "held", 0)
	b.insert(t, msg)
	r := b.newRelay(t)
	r.acknowledged.Store(faultHoldEvery - 1) // the next acknowledged batch is held

	start := time.Now()
	startRelay(t, r)
	b.waitAllPublished(t, 1, 20*time.Second)
	if elapsed := time.Since(start); elapsed < b.cfg.Lease-500*time.Millisecond {
		t.Errorf("event marked %s after the start, want no sooner than the lease (%s): the held batch was not held", elapsed, b.cfg.Lease)
	}
	// The held worker wakes after the other one has published: its late mark fails then.
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(r.metrics.leasesExpired)
		return n == 1, fmt.Sprintf("outbox_leases_expired_total = %v, want 1 (the held batch's late mark)", n)
	})
	copies := map[string]int{}
	for _, rec := range b.consume(t, 2, 15*time.Second) {
		copies[header(rec, event.HeaderID)]++
	}
	if diff := cmp.Diff(map[string]int{msg.ID.String(): 2}, copies); diff != "" {
		t.Errorf("copies per X-Event-Id (-want +got):\n%s", diff)
	}
}
