package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// rollingRestart is the rolling-restart scenario: the three brokers restarted one at a
// time, as an operator upgrading the cluster does (SIGTERM, a controlled shutdown that
// hands the broker's leaderships over; start; wait until it is back in the ISR of every
// partition before the next), while payments flow. With min.insync.replicas=2 of three,
// one broker down never stops a write under acks=all.
type rollingRestart struct{}

// disrupt restarts all three brokers even when the run ends first: an operator does not
// leave a cluster half-upgraded, and the next scenario expects every broker in sync. A
// restart begun after the load is not what the run is about; the validity rows count
// only those begun during it.
func (rollingRestart) disrupt(ctx context.Context, rn *harness.Run) error {
	ctx = context.WithoutCancel(ctx)
	for node := int32(1); node <= devstack.ClusterNodes; node++ {
		if err := stopBroker(ctx, rn, node); err != nil {
			return err
		}
		if err := startBroker(ctx, rn, node, inSyncWait); err != nil {
			return err
		}
	}
	return nil
}

func (rollingRestart) validity(r *verdict.Report, rn *harness.Run) []verdict.Check {
	ev := r.Cluster
	stops := actions(ev, "SIGTERM")
	var steps []string
	oneAtATime := len(stops) == devstack.ClusterNodes
	for i, s := range stops {
		back := nextAction(ev, s.Node, "in sync", s.AtS)
		steps = append(steps, fmt.Sprintf("broker %d stopped at %.1fs, in sync %s", s.Node, s.AtS, atOrNever(back)))
		// The next broker may stop only once this one is back in sync.
		if back == nil || (i+1 < len(stops) && stops[i+1].AtS < back.AtS) {
			oneAtATime = false
		}
	}
	during := 0
	for _, s := range stops {
		if s.AtS < rn.LoadEndS {
			during++
		}
	}
	return []verdict.Check{
		verdict.NewCheck(verdict.Validity, "brokers restarted one at a time (SIGTERM, start, back in sync before the next)", fmt.Sprintf("%d of %d", devstack.ClusterNodes, devstack.ClusterNodes), strings.Join(steps, "; "), oneAtATime),
		verdict.NewCheck(verdict.Validity, "leader changes seen during the restarts (harness's metadata, DIRECT)", "> 0", len(ev.LeaderChanges), len(ev.LeaderChanges) > 0),
		verdict.NewCheck(verdict.Validity, "brokers stopped while payments were arriving", fmt.Sprintf("%d of %d", devstack.ClusterNodes, devstack.ClusterNodes), fmt.Sprintf("%d (load ended at %.1fs)", during, rn.LoadEndS), during == devstack.ClusterNodes),
		verdict.NewCheck(verdict.SLO, "payments the API refused during the restarts", "0", fmt.Sprintf("%d (client retries: %d)", r.APIRejected, r.APIRetries), r.APIRejected == 0),
	}
}
