package stack

import (
	"context"
	"log/slog"
	"time"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

// The cluster scenarios run on the three-node cluster of KAFKA_NODES=3
// scripts/stack/kafka.sh (devstack.ClusterBrokers), beside the single broker the other
// scenarios use. The relay seeds at the three brokers' proxies, the consumer and the
// harness at their DIRECT listeners; the harness kills, stops and starts brokers with
// the script's node verbs and follows the cluster with a clusterWatch.

// StartCluster starts the three-node cluster unless it already runs, and remembers
// that it did, so that StopStarted stops it again. It says how long the start took.
func (s *Native) StartCluster(ctx context.Context) error {
	if _, err := devstack.ClusterScript(ctx, s.Root, "status"); err == nil {
		s.Logger.Info("three-node Kafka cluster already running, left as is")
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	started := time.Now()
	if _, err := devstack.ClusterScript(ctx, s.Root, "start"); err != nil {
		return err
	}
	s.clusterStarted = true
	s.Logger.Info("three-node Kafka cluster started", slog.Duration("took", time.Since(started).Round(100*time.Millisecond)))
	return nil
}

// stopCluster stops the cluster if StartCluster started it.
func (s *Native) stopCluster(ctx context.Context) error {
	if !s.clusterStarted {
		return nil
	}
	s.clusterStarted = false
	_, err := devstack.ClusterScript(ctx, s.Root, "stop")
	return err
}
