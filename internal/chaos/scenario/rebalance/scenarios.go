package rebalance

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/groupwatch"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// sessionTimeout is the instances' KAFKA_SESSION_TIMEOUT, the broker's minimum: a
// killed or frozen instance loses its partitions this long after its last heartbeat.
const sessionTimeout = 6 * time.Second

// Scenario is consumer-rebalance, with the consumer's own rebalance protocol.
func Scenario(short bool) harness.Scenario { return WithProtocol(short, "") }

// joinedAs maps each protocol KAFKA_REBALANCE_PROTOCOL names to what the group tap
// sees the members join with (groupwatch.Join.Protocol): the classic balancer the
// group chose, or KIP-848's heartbeat.
var joinedAs = map[string]string{
	"eager":              "sticky",
	"cooperative-sticky": "cooperative-sticky",
	"consumer":           groupwatch.ProtocolConsumer,
}

// Protocols lists the rebalance protocols WithProtocol takes.
func Protocols() []string { return slices.Sorted(maps.Keys(joinedAs)) }

// WithProtocol is consumer-rebalance with every instance started with
// KAFKA_REBALANCE_PROTOCOL=protocol (eager, cooperative-sticky or consumer, see
// Protocols), and a validity row that the group ran it; "" leaves the consumer's own.
func WithProtocol(_ bool, protocol string) harness.Scenario {
	r := &rebalancing{Freeze: sessionTimeout + 3*time.Second, Settle: 20 * time.Second, Pause: 3 * time.Second, ZombieTries: 3, Protocol: protocol}
	env := []string{"ANTIFRAUD_MAX_POLL_RECORDS=10", "KAFKA_SESSION_TIMEOUT=" + sessionTimeout.String()}
	if protocol != "" {
		env = append(env, "KAFKA_REBALANCE_PROTOCOL="+protocol)
	}
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
		ConsumerEnv:      env,
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
	var h groupwatch.History
	if rn.GroupTap != nil {
		h = rn.GroupTap.History()
		for _, z := range ev.zombies {
			late = append(late, h.LateCommits(z.instance, z.frozenAtS, z.resumedAtS)...)
		}
	}
	refused := map[int16]int{}
	for _, c := range late {
		refused[c.ErrorCode]++
	}
	checks := []verdict.Check{
		verdict.NewCheck(verdict.Validity, "membership changes made by the harness (added, SIGTERM, SIGKILL, SIGSTOP past the session)", "4",
			strings.Join(ev.done, ", "), len(ev.done) == 4),
		verdict.NewCheck(verdict.Validity, "rebalances seen by the harness's group view (DescribeGroups every 100 ms)", ">= 4",
			fmt.Sprintf("%d (%d changes of state, members or assignments)", groupwatch.Rebalances(ev.samples), len(ev.samples)), groupwatch.Rebalances(ev.samples) >= 4),
		verdict.NewCheck(verdict.Validity, "partitions that moved while records were in flight (group view: end offset > committed)", "> 0",
			fmt.Sprintf("%d of %d moves", inFlight, len(moves)), inFlight > 0),
		verdict.NewCheck(verdict.Validity, "resumed zombie's late commit attempts (group tap: its old member id and generation or member epoch)", "> 0",
			fmt.Sprintf("%d after %d freezes (broker's answers by error code: %v)", len(late), len(ev.zombies), refused), len(late) > 0),
		judgedCheck(h, rn.Topic),
	}
	if r.Protocol != "" {
		checks = append(checks, protocolCheck(h, r.Protocol))
	}
	return checks
}

// judgedCheck proves that the SLO row on non-owner commits judged every commit: an
// accepted commit of a generation or member epoch whose assignments the tap did not
// read (a protocol it cannot read, say) could be anybody's.
func judgedCheck(h groupwatch.History, topic string) verdict.Check {
	o := h.NonOwnerCommits(topic)
	return verdict.NewCheck(verdict.Validity, "accepted commits the group tap could judge (assignments of their generation or member epoch seen)", "all, > 0",
		fmt.Sprintf("%d of %d", o.Judged, o.Judged+o.Unjudged), o.Judged > 0 && o.Unjudged == 0)
}

// protocolCheck proves that the group ran the protocol asked for: franz-go, asked for
// KIP-848 by a broker without it, falls back to the classic protocol without a word.
func protocolCheck(h groupwatch.History, protocol string) verdict.Check {
	joins := h.Protocols()
	want := joinedAs[protocol]
	return verdict.NewCheck(verdict.Validity, "protocol the instances joined the group with (group tap), for KAFKA_REBALANCE_PROTOCOL="+protocol, "every join "+want,
		fmt.Sprintf("%v", joins), len(joins) == 1 && joins[want] > 0)
}
