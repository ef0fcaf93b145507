package cluster

import (
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
)

// BrokerFailover is the broker-failover scenario: the broker leading the most
// partitions SIGKILLed and restarted, then a second one. short makes the outage and the
// load shorter, for the CI test.
func BrokerFailover(short bool) harness.Scenario {
	failover := brokerFailover{Down: 20 * time.Second}
	failoverSpan := 90 * time.Second
	if short {
		failover.Down, failoverSpan = 10*time.Second, 70*time.Second
	}
	return harness.Scenario{
		Name: "broker-failover",
		Description: "on the three-node cluster, during a load paced over " + failoverSpan.String() + ": the broker leading the most partitions SIGKILLed, restarted " + failover.Down.String() +
			" later; then a second broker killed (the consumer group's coordinator unless it already died) and restarted; the relay and the consumer must follow the new leaders and the new coordinator, with exactly-once effects",
		Cluster:   true,
		Span:      failoverSpan,
		LoadDelay: -3 * time.Second, // the load starts first; the first kill 3 s into it
		CopyEvery: harness.DefaultCopyEvery,
		Disrupt:   failover.disrupt,
		Validity:  failover.validity,
	}
}

// PartitionOffline is the partition-offline scenario: the relay cut off from the
// broker leading one partition while the cluster stays healthy.
func PartitionOffline(bool) harness.Scenario {
	// 20 s: longer than the relay's lease (10 s) and its outage backoff cap (2 s)
	// together, so the cut outlasts every timer that could hide it.
	offline := &partitionOffline{For: 20 * time.Second}
	return harness.Scenario{
		Name: "partition-offline",
		Description: "on the three-node cluster, the relay cut off for " + offline.For.String() + " from the broker leading one partition (its proxy disabled) while the cluster stays healthy, 8 s into a load paced over 36 s; " +
			"the other partitions' events must keep reaching the topic at close to their rate before the cut, and everything must drain after it (relay head of " + strings.Join(partitionOfflineEnv, ", ") + ")",
		Cluster:   true,
		Span:      36 * time.Second,
		LoadDelay: -8 * time.Second,
		APIEnv:    partitionOfflineEnv,
		Disrupt:   offline.disrupt,
		Validity:  offline.validity,
	}
}

// RollingRestart is the rolling-restart scenario: the three brokers restarted one at
// a time, as for an upgrade. short makes the load shorter, for the CI test.
func RollingRestart(short bool) harness.Scenario {
	// A rolling restart of three brokers takes about 90 s on a quiet machine, and up to
	// 75 s per broker on a busy one: every broker must be stopped while payments still
	// arrive.
	rollingSpan := 180 * time.Second
	if short {
		rollingSpan = 150 * time.Second
	}
	return harness.Scenario{
		Name:        "rolling-restart",
		Description: "on the three-node cluster, the three brokers restarted one at a time (SIGTERM, start, back in sync before the next), as for an upgrade, during a load paced over " + rollingSpan.String() + "; nothing lost, and the API never refuses a payment",
		Cluster:     true,
		Span:        rollingSpan,
		LoadDelay:   -3 * time.Second,
		CopyEvery:   harness.DefaultCopyEvery,
		Disrupt:     rollingRestart{}.disrupt,
		Validity:    rollingRestart{}.validity,
	}
}
