// Package replicapause holds the replica-pause scenario: two API processes, each with
// its relay, share one outbox; one is frozen (SIGSTOP) past its lease while the other
// takes its rows over, then runs alone, the other frozen, so that any late outcome of
// the paused relay would show. Its late outcomes must change nothing, copies in the
// topic are allowed, and each payment's order must hold.
//
// Start with scenarios.go, which makes the Scenario, then replicapause.go: the pauses of
// the polling relay and the comparison of the outbox rows before and after the paused
// replica ran alone. replicapausecdc.go is the same for the CDC relay, which leases
// nothing: the replica paused is the one streaming from the replication slot, and the
// other must take the slot over. replicapausehold.go watches for claiming transactions
// that outlive the lease.
package replicapause
