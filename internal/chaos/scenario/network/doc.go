// Package network holds the scenarios that break the link between the relay and Kafka
// through the stack's Toxiproxy proxy: default, the course's scenario (acks lost,
// requests dropped, the proxy down, in turn, half of the time); dual-write, the same
// against the API's teaching dual-write mode, which is expected to lose events; and
// kafka-down, the broker unreachable for a minute while the API keeps its published
// rows only a few seconds, so that its cleanup runs throughout the outage and must
// delete nothing unpublished.
//
// Start with scenarios.go, which makes the three Scenarios; the faults themselves are
// package faults' (Proxy.Cycle, Proxy.Hold), and retention.go is kafka-down's short
// retention and its row.
package network
