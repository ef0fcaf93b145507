// Package cluster holds the scenarios on the three-node Kafka cluster (Scenario.Cluster:
// the topic has three replicas and min.insync.replicas=2): broker-failover kills the
// broker leading the most partitions and then a second one, partition-offline cuts the
// relay off from one broker by its own proxy, rolling-restart restarts the three
// brokers one at a time. A broker takes 5 to 30 s to start on a small, busy machine, so
// their loads are paced over long enough for every kill and restart to happen while
// payments arrive.
//
// Start with scenarios.go, which makes the three Scenarios. cluster.go kills, stops and
// starts brokers through scripts/stack/kafka.sh; failover.go, partitionoffline.go and
// rollingrestart.go are each scenario's disruption and validity rows, which read the
// cluster as faults.ClusterWatch followed it from outside (leaders, in-sync replicas,
// the group's coordinator and commits).
package cluster
