package cluster

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// The cluster scenarios run on the three-node cluster of KAFKA_NODES=3
// scripts/stack/kafka.sh (devstack.ClusterBrokers), beside the single broker the other
// scenarios use. The relay seeds at the three brokers' proxies, the consumer and the
// harness at their DIRECT listeners; the harness kills, stops and starts brokers with
// the script's node verbs and follows the cluster with a faults.ClusterWatch.

// nodeVerb runs one of the script's node verbs (kill-node, stop-node, start-node).
func nodeVerb(ctx context.Context, rn *harness.Run, verb string, node int32) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	_, err := devstack.ClusterScript(ctx, rn.Stack.Root, verb, strconv.Itoa(int(node)))
	return err
}

// killBroker SIGKILLs a broker: a crash, with no controlled shutdown to move its
// leaderships first, so its partitions have no leader until the controller fences it.
func killBroker(ctx context.Context, rn *harness.Run, node int32) error {
	a := rn.Cluster.Record(node, "SIGKILL")
	rn.Disrupted(fmt.Sprintf("SIGKILL broker %d", node), fmt.Sprintf("it led partitions %v; group coordinator: %t", a.Led, a.Coordinator))
	return nodeVerb(ctx, rn, "kill-node", node)
}

// stopBroker stops a broker as an operator does before an upgrade: SIGTERM, a
// controlled shutdown that hands its leaderships over first.
func stopBroker(ctx context.Context, rn *harness.Run, node int32) error {
	a := rn.Cluster.Record(node, "SIGTERM")
	rn.Disrupted(fmt.Sprintf("SIGTERM broker %d", node), fmt.Sprintf("it led partitions %v; group coordinator: %t", a.Led, a.Coordinator))
	return nodeVerb(ctx, rn, "stop-node", node)
}

// startBroker starts a broker again and waits until it is back in the ISR of every
// partition of the run's topic (or maxWait passed: the row that needs it says so). It
// runs even when ctx has ended, so that no scenario leaves the cluster a broker short.
func startBroker(ctx context.Context, rn *harness.Run, node int32, maxWait time.Duration) error {
	ctx = context.WithoutCancel(ctx)
	if err := nodeVerb(ctx, rn, "start-node", node); err != nil {
		return err
	}
	rn.Cluster.Record(node, "started")
	rn.Disrupted(fmt.Sprintf("broker %d started", node), "")
	deadline := time.Now().Add(maxWait)
	for !rn.Cluster.InSyncEverywhere(node) {
		if time.Now().After(deadline) {
			rn.Disrupted(fmt.Sprintf("broker %d not back in sync", node), fmt.Sprintf("after %s", maxWait))
			return nil
		}
		if err := backoff.Until(ctx, time.Now().Add(faults.ClusterPollInterval)); err != nil {
			return err
		}
	}
	rn.Cluster.Record(node, "in sync")
	rn.Disrupted(fmt.Sprintf("broker %d back in sync", node), "in the ISR of every partition of the topic")
	return nil
}

// downFor keeps a killed or stopped broker down for d, or until ctx ends, then starts
// it again: a broker is never left down, whatever happens to the run.
func downFor(ctx context.Context, rn *harness.Run, node int32, d time.Duration) error {
	_ = backoff.Until(ctx, time.Now().Add(d))
	return startBroker(ctx, rn, node, inSyncWait)
}

// inSyncWait bounds the wait for a restarted broker to catch up: it must fetch what
// the others took while it was down, on a machine that may be busy with everything else.
const inSyncWait = 90 * time.Second
