package rebalance

import (
	"fmt"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/groupwatch"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// sessionTimeout is the instances' KAFKA_SESSION_TIMEOUT, the broker's minimum: a
// killed or frozen instance loses its partitions this long after its last heartbeat.
const sessionTimeout = 6 * time.Second

// Scenario is consumer-rebalance.
func Scenario(bool) harness.Scenario {
	r := &rebalancing{Freeze: sessionTimeout + 3*time.Second, Settle: 20 * time.Second, Pause: 3 * time.Second, ZombieTries: 3}
	return harness.Scenario{
		Name: "consumer-rebalance",
		Description: "three consumer instances in one group under the lifecycle load; the harness adds a fourth, stops one gracefully (SIGTERM), SIGKILLs one, and freezes one (SIGSTOP) for " + r.Freeze.String() +
			", past the session timeout (" + sessionTimeout.String() + "), just as records reach it, then resumes it (SIGCONT): a zombie that wakes up holding a batch of a generation that has ended; " +
			"the group is followed from outside (DescribeGroups every 100 ms) and every commit is read on the wire by a tap between the instances and the broker, which judges it by the assignments of its generation",
		Consumers: 3,
		// Long enough for the four changes, each followed by a rebalance, to happen
		// under load: the zombie needs records arriving to be frozen with a batch.
		Span: 60 * time.Second,
		// Small batches make many commits, each one judged; a short session makes the
		// kill and the freeze cost 6 s, not 45. Both are optional tuning in the contract.
		ConsumerEnv:      []string{"ANTIFRAUD_MAX_POLL_RECORDS=10", "KAFKA_SESSION_TIMEOUT=" + sessionTimeout.String()},
		Disrupt:          r.disrupt,
		FinishDisruption: true,
		Validity:         r.validity,
	}
}

// validity are the rows that prove the group really rebalanced under load.
func (r *rebalancing) validity(_ *verdict.Report, rn *harness.Run) []verdict.Check {
	ev := r.read()
	moves := groupwatch.Moves(ev.samples)
	inFlight := 0
	for _, m := range moves {
		if m.InFlight > 0 {
			inFlight++
		}
	}
	var late []groupwatch.Commit
	if rn.GroupTap != nil {
		h := rn.GroupTap.History()
		for _, z := range ev.zombies {
			late = append(late, h.LateCommits(z.instance, z.frozenAtS, z.resumedAtS)...)
		}
	}
	refused := map[int16]int{}
	for _, c := range late {
		refused[c.ErrorCode]++
	}
	return []verdict.Check{
		verdict.NewCheck(verdict.Validity, "membership changes made by the harness (added, SIGTERM, SIGKILL, SIGSTOP past the session)", "4",
			strings.Join(ev.done, ", "), len(ev.done) == 4),
		verdict.NewCheck(verdict.Validity, "rebalances seen by the harness's group view (DescribeGroups every 100 ms)", ">= 4",
			fmt.Sprintf("%d (%d changes of state, members or assignments)", groupwatch.Rebalances(ev.samples), len(ev.samples)), groupwatch.Rebalances(ev.samples) >= 4),
		verdict.NewCheck(verdict.Validity, "partitions that moved while records were in flight (group view: end offset > committed)", "> 0",
			fmt.Sprintf("%d of %d moves", inFlight, len(moves)), inFlight > 0),
		verdict.NewCheck(verdict.Validity, "resumed zombie's late commit attempts (group tap: its old member id and generation)", "> 0",
			fmt.Sprintf("%d after %d freezes (broker's answers by error code: %v)", len(late), len(ev.zombies), refused), len(late) > 0),
	}
}
