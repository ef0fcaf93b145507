package cluster

import (
	"context"
	"fmt"
	"slices"

	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// partitionOffline is the partition-offline scenario: the relay is cut off from the
// broker that leads one partition (its Toxiproxy proxy disabled) for longer than the
// relay's lease and its outage backoff cap, while the cluster itself stays healthy (the
// brokers replicate and the consumer reads on DIRECT). That partition is down for the
// relay; the others are not, and their events must keep flowing.
//
// It catches head-of-line blocking: a relay whose failed rows go back to the head of
// the claim order lets a partition's blocked events fill every worker's batch, and the
// healthy partitions then publish nothing until the cut ends.
type partitionOffline struct {
	// For is how long the cut lasts.
	For time.Duration
	// cut is what the disruption cut, for the validity rows; set before the window
	// opens and read after the disruption ended.
	cut struct {
		broker     int32
		partitions []int32
	}
}

// minHealthyRate is the share of their rate before the cut that the other partitions'
// publish rate must keep during it. Below it, a healthy partition waits for a sick one.
const minHealthyRate = 0.5

// partitionOfflineEnv makes the head of the relay's queue small, so that 100 payments
// can fill it: the head is RELAY_WORKERS × RELAY_BATCH_SIZE rows (4 × 1000 by default,
// which a production relay at 1000 events/s fills in seconds too). With 2 × 3, six
// blocked events of one partition are enough, about six seconds of this load. With the
// defaults the head never fills: every batch still carries healthy events past the cut,
// and a relay that lets a sick partition hold the head would pass. Two designs fail
// here, well below minHealthyRate: failed rows back at the head of the claim order, and
// batches that each wait the publish timeout for their one event of the cut partition.
// The partition breaker (internal/outbox/internal/delivery/breaker.go) is the relay's answer to both.
var partitionOfflineEnv = []string{"RELAY_WORKERS=2", "RELAY_BATCH_SIZE=3"}

func (o *partitionOffline) disrupt(ctx context.Context, rn *harness.Run) error {
	broker := fewestLeading(rn.Cluster)
	if broker < 0 {
		return fmt.Errorf("partition-offline: no broker leads a partition of the topic")
	}
	cut, err := faults.New(rn.Ports.ToxiproxyAPI(), devstack.ClusterProxy(broker), rn.Origin, rn.Logger)
	if err != nil {
		return err
	}
	cut.CountFailures(rn.FailedPublishAttempts)
	o.cut.broker, o.cut.partitions = broker, rn.Cluster.Led(broker)
	rn.Faults = cut // the report's fault windows are this proxy's
	rn.Disrupted(fmt.Sprintf("relay cut off from broker %d", broker), fmt.Sprintf("proxy %s disabled for %s; it leads partitions %v", devstack.ClusterProxy(broker), o.For, o.cut.partitions))
	return cut.Hold(ctx, faults.ProxyDown, o.For)
}

// fewestLeading returns the broker leading the fewest partitions, but at least one, so
// the cut takes as few partitions as possible (one, when leaders are balanced).
func fewestLeading(w *faults.ClusterWatch) int32 {
	best, fewest := int32(-1), 1<<30
	for node := int32(1); node <= devstack.ClusterNodes; node++ {
		if n := len(w.Led(node)); n > 0 && n < fewest {
			best, fewest = node, n
		}
	}
	return best
}

func (o *partitionOffline) validity(r *verdict.Report, _ *harness.Run) []verdict.Check {
	var w faults.Window
	if len(r.FaultWindows) > 0 {
		w = r.FaultWindows[0]
	}
	cutName := fmt.Sprintf("relay cut off from broker %d, leader of partitions %v (proxy %s disabled)", o.cut.broker, o.cut.partitions, devstack.ClusterProxy(o.cut.broker))
	lasted := w.EndS - w.StartS
	held, leaked := o.heldBack(r, w)
	moved := 0
	for _, ch := range r.Cluster.LeaderChanges {
		if slices.Contains(o.cut.partitions, ch.Partition) && ch.AtS >= w.StartS && ch.AtS <= w.EndS {
			moved++
		}
	}
	before, during := o.healthyRates(r, w)
	ratio := 0.0
	if before > 0 {
		ratio = during / before
	}
	return []verdict.Check{
		verdict.NewCheck(verdict.Validity, cutName, fmt.Sprintf(">= %s", o.For), fmt.Sprintf("%.1fs, from %.1fs", lasted, w.StartS), w.EndS > 0 && lasted >= o.For.Seconds()-0.5),
		verdict.NewCheck(verdict.Validity, "events of the cut partitions accepted during the cut and held back by it", "> 0, none in the topic before it ended", fmt.Sprintf("%d held back, %d in the topic before the end", held, leaked), held > 0 && leaked == 0),
		verdict.NewCheck(verdict.Validity, "the cut partitions kept their leader (a cut, not a failover)", "0 leader changes", moved, moved == 0),
		verdict.NewCheck(verdict.SLO, "other partitions' events reaching the topic during the cut, per second, against before it", fmt.Sprintf(">= %.0f%% of the rate before", 100*minHealthyRate),
			fmt.Sprintf("%.2f/s during against %.2f/s before (%.0f%%)", during, before, 100*ratio), before > 0 && ratio >= minHealthyRate),
	}
}

// heldBack counts the payments of the cut partitions accepted while the cut was on (at
// least HealthyPublishS before its end) whose event reached the topic only after it;
// leaked counts those that reached it before the end: a cut that did not bite.
func (o *partitionOffline) heldBack(r *verdict.Report, w faults.Window) (held, leaked int) {
	ev := r.Evidence
	if ev == nil || w.EndS <= 0 {
		return 0, 0
	}
	for id, accepted := range ev.AcceptedS {
		if accepted < w.StartS || accepted > w.EndS-harness.HealthyPublishS || !slices.Contains(o.cut.partitions, ev.Partition[id]) {
			continue
		}
		if seen, ok := ev.FirstSeenS[id]; ok && seen <= w.EndS {
			leaked++
		} else {
			held++
		}
	}
	return held, leaked
}

// healthyRates are the other partitions' events reaching the topic per second, from the
// start of the load to the cut, and during the cut.
func (o *partitionOffline) healthyRates(r *verdict.Report, w faults.Window) (before, during float64) {
	ev := r.Evidence
	if ev == nil || w.EndS <= 0 || w.StartS <= ev.LoadStartS {
		return 0, 0
	}
	var nBefore, nDuring int
	for id, seen := range ev.FirstSeenS {
		if _, ours := ev.AcceptedS[id]; !ours || slices.Contains(o.cut.partitions, ev.Partition[id]) {
			continue
		}
		switch {
		case seen >= ev.LoadStartS && seen < w.StartS:
			nBefore++
		case seen >= w.StartS && seen <= w.EndS:
			nDuring++
		}
	}
	return float64(nBefore) / (w.StartS - ev.LoadStartS), float64(nDuring) / (w.EndS - w.StartS)
}
