// Package rebalance holds the consumer-rebalance scenario: three consumer instances in
// one group under the lifecycle load, while the harness adds one, stops one gracefully
// (SIGTERM), SIGKILLs one and freezes one (SIGSTOP) past the session timeout with a
// batch on its way to it, then resumes it: a zombie that wakes up holding records of a
// generation that has ended.
//
// Start with scenarios.go, which makes the Scenario and its validity rows. steps.go
// holds the disruption, one step per membership change, each waiting for the group
// to settle. The evidence comes from outside the services: the harness's own view of
// the group (groupwatch.View) and the group tap between the instances and the broker
// (groupwatch.Tap), which also feeds the harness's SLO row on commits by a non-owner.
package rebalance
