// Package faults holds the fault mechanics that need not know the run they serve: a
// Toxiproxy proxy broken on a deterministic schedule, copies of real records injected
// into the topic, and a watch of the three-node cluster that the broker faults aim by.
//
// Start with faults.go: New finds a Toxiproxy proxy, Inject and Clear apply one Kind of
// fault to it (dropped requests, lost acks, slow acks, the proxy down), and Cycle and
// Hold run them on a schedule, recording each Window; the harness's own probe through
// the proxy is the evidence that a window bit. copies.go follows the topic live
// (TopicWatch) and writes exact copies of some records back, so that the consumer's
// dedup is exercised whatever the relay does. clusterwatch.go follows the three-node
// cluster from outside (ClusterWatch), so that the cluster scenarios can aim their
// kills and prove what they did.
package faults
