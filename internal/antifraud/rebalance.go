package antifraud

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A RebalanceProtocol is how the group moves partitions between its members when one
// joins or leaves. The callbacks of group.go are the same under all three, because
// each one only ever commits what this member processed of the partitions it hands
// over, and BlockRebalanceOnPoll makes every handover wait for the batch in flight;
// what differs is how much stops while the group rebalances.
type RebalanceProtocol string

const (
	// RebalanceEager is the classic protocol with a stop-the-world handover: at every
	// rebalance each member gives up all its partitions (OnPartitionsRevoked with
	// everything), rejoins, and resumes only what the new assignment gives it. The
	// assignor is franz-go's sticky one, so the assignment moves as few partitions as
	// the cooperative one does; only the handover differs.
	RebalanceEager RebalanceProtocol = "eager"
	// RebalanceCooperativeSticky is the classic protocol with incremental handovers (KIP-429):
	// a member gives up only the partitions that move, in a first rebalance, and
	// their new owner gets them in a second; the others are consumed throughout.
	RebalanceCooperativeSticky RebalanceProtocol = "cooperative-sticky"
	// RebalanceConsumer is KIP-848's consumer group protocol (Kafka 4.0+): the broker assigns
	// (its "uniform" assignor), each member heartbeats its way to its target
	// assignment, and commits carry the member's epoch instead of a generation. The
	// session timeout is the broker's (group.consumer.session.timeout.ms, 45s by
	// default): KAFKA_SESSION_TIMEOUT does not apply. A broker without the protocol
	// makes franz-go fall back to cooperative-sticky.
	RebalanceConsumer RebalanceProtocol = "consumer"
)

// DefaultRebalanceProtocol is the protocol the consumer ships with
// (docs/adr/0004-consumer-dedup-store.md says why).
const DefaultRebalanceProtocol = RebalanceCooperativeSticky

// RebalanceProtocols lists the protocols, in the order the docs present them.
var RebalanceProtocols = []RebalanceProtocol{RebalanceEager, RebalanceCooperativeSticky, RebalanceConsumer}

// ParseRebalanceProtocol reads a protocol's name; an empty name is the default.
func ParseRebalanceProtocol(name string) (RebalanceProtocol, error) {
	if name == "" {
		return DefaultRebalanceProtocol, nil
	}
	for _, p := range RebalanceProtocols {
		if string(p) == name {
			return p, nil
		}
	}
	return "", fmt.Errorf("rebalance protocol %q: want %s, %s or %s", name, RebalanceEager, RebalanceCooperativeSticky, RebalanceConsumer)
}

// groupOpts are the franz-go options that select the protocol.
func (p RebalanceProtocol) groupOpts() []kgo.Opt {
	switch p {
	case RebalanceEager:
		return []kgo.Opt{kgo.Balancers(kgo.StickyBalancer())}
	case RebalanceConsumer:
		// franz-go maps its sticky balancers to the broker's uniform assignor; the
		// balancer stays the fallback if the broker lacks the protocol.
		return []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.ServerSideBalancer()}
	default:
		return []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())}
	}
}
