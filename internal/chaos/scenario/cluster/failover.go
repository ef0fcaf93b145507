package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// brokerFailover is the broker-failover scenario: during the load, SIGKILL the broker
// that leads the most partitions of the topic, restart it Down later, then kill a
// second broker (the consumer group's coordinator if it has not died yet and leads a
// partition, else a broker that took over a partition from the first), and restart it
// too. The relay and the consumer must follow the leaders and the coordinator.
type brokerFailover struct {
	// Down is how long each killed broker stays dead.
	Down time.Duration
}

func (f brokerFailover) disrupt(ctx context.Context, rn *harness.Run) error {
	first := mostLeading(rn.Cluster)
	if first < 0 {
		return fmt.Errorf("broker-failover: no partition of the topic has a leader")
	}
	if err := killBroker(ctx, rn, first); err != nil {
		return err
	}
	if err := downFor(ctx, rn, first, f.Down); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	second := secondVictim(rn.Cluster, first)
	if err := killBroker(ctx, rn, second); err != nil {
		return err
	}
	return downFor(ctx, rn, second, f.Down)
}

// mostLeading returns the broker leading the most partitions (the lowest id on a tie),
// -1 if none leads any.
func mostLeading(w *faults.ClusterWatch) int32 {
	best, most := int32(-1), 0
	for node := int32(1); node <= devstack.ClusterNodes; node++ {
		if n := len(w.Led(node)); n > most {
			best, most = node, n
		}
	}
	return best
}

// secondVictim prefers the group's coordinator, so that the consumer's coordinator
// dies at least once, as long as it is not the first victim (then it already did) and
// leads a partition; otherwise a broker that took a partition over from the first
// victim; otherwise any other broker.
func secondVictim(w *faults.ClusterWatch, first int32) int32 {
	if c := w.Coordinator(); c > 0 && c != first && len(w.Led(c)) > 0 {
		return c
	}
	for _, ch := range w.LeaderChanges() {
		if ch.From == first && ch.To > 0 && ch.To != first {
			return ch.To
		}
	}
	return first%devstack.ClusterNodes + 1
}

func (f brokerFailover) validity(r *verdict.Report, rn *harness.Run) []verdict.Check {
	ev := r.Cluster
	kills := actions(ev, "SIGKILL")
	restarted := 0
	var killed []string
	coordinatorKilled := -1.0
	for _, k := range kills {
		back := nextAction(ev, k.Node, "started", k.AtS)
		if back != nil {
			restarted++
		}
		killed = append(killed, fmt.Sprintf("broker %d at %.1fs (led %v, coordinator %t, back %s)", k.Node, k.AtS, k.Led, k.Coordinator, atOrNever(back)))
		if k.Coordinator && coordinatorKilled < 0 {
			coordinatorKilled = k.AtS
		}
	}
	led, moved := 0, 0
	for _, k := range kills {
		led += len(k.Led)
		for _, p := range k.Led {
			if leaderChangedAfter(ev, p, k.Node, k.AtS) {
				moved++
			}
		}
	}
	written := writtenWhileLeaderDead(r, ev)
	committedAfter := committedSince(ev, coordinatorKilled)
	return []verdict.Check{
		verdict.NewCheck(verdict.Validity, "brokers SIGKILLed and restarted by the harness", "2 kills, each restarted", fmt.Sprintf("%d kills, %d restarted: %s", len(kills), restarted, strings.Join(killed, "; ")), len(kills) >= 2 && restarted == len(kills)),
		verdict.NewCheck(verdict.Validity, "partitions of the killed brokers got a new leader (harness's metadata, DIRECT)", fmt.Sprintf("%d of %d", led, led), fmt.Sprintf("%d of %d; %d leader changes in all", moved, led, len(ev.LeaderChanges)), led > 0 && moved == led),
		verdict.NewCheck(verdict.Validity, "events written to a partition while its old leader was dead (the relay found the new leader)", "> 0", written, written > 0),
		verdict.NewCheck(verdict.Validity, "the consumer group's coordinator among the brokers killed", "true", coordinatorKilled >= 0, coordinatorKilled >= 0),
		verdict.NewCheck(verdict.Validity, "offsets the group committed after its coordinator was killed (the consumer found the new one)", "> 0", committedAfter, committedAfter > 0),
	}
}

// actions returns the broker actions of a kind, in order.
func actions(ev *faults.ClusterEvidence, action string) []faults.BrokerAction {
	var out []faults.BrokerAction
	for _, a := range ev.Brokers {
		if a.Action == action {
			out = append(out, a)
		}
	}
	return out
}

// nextAction returns node's first action of a kind after atS, nil if none.
func nextAction(ev *faults.ClusterEvidence, node int32, action string, atS float64) *faults.BrokerAction {
	for i, a := range ev.Brokers {
		if a.Node == node && a.Action == action && a.AtS >= atS {
			return &ev.Brokers[i]
		}
	}
	return nil
}

func atOrNever(a *faults.BrokerAction) string {
	if a == nil {
		return "never"
	}
	return fmt.Sprintf("at %.1fs", a.AtS)
}

// leaderChangedAfter reports whether partition p's leader moved off node after atS.
func leaderChangedAfter(ev *faults.ClusterEvidence, p, node int32, atS float64) bool {
	for _, ch := range ev.LeaderChanges {
		if ch.Partition == p && ch.From == node && ch.AtS >= atS {
			return true
		}
	}
	return false
}

// writtenWhileLeaderDead counts the payments whose event first reached a partition
// while the broker that led it before a kill was dead: such a record can only have
// been written to the new leader, so the relay found it.
func writtenWhileLeaderDead(r *verdict.Report, ev *faults.ClusterEvidence) int {
	if r.Evidence == nil {
		return 0
	}
	n := 0
	for _, k := range actions(ev, "SIGKILL") {
		back := nextAction(ev, k.Node, "started", k.AtS)
		end := r.DurationSeconds + 1e9
		if back != nil {
			end = back.AtS
		}
		for id, seen := range r.Evidence.FirstSeenS {
			if seen > k.AtS && seen < end && slices.Contains(k.Led, r.Evidence.Partition[id]) {
				n++
			}
		}
	}
	return n
}

// committedSince is how far the group's committed offsets grew after atS (< 0: never
// asked), as the cluster watch sampled them.
func committedSince(ev *faults.ClusterEvidence, atS float64) int64 {
	if atS < 0 {
		return 0
	}
	var before, last int64 = -1, 0
	for _, s := range ev.Committed {
		if s.AtS <= atS {
			before = s.Sum
		}
		last = s.Sum
	}
	if before < 0 {
		before = 0
	}
	return last - before
}
