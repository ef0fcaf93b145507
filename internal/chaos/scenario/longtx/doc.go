// Package longtx holds the long-transaction scenario: while payments arrive at a steady
// rate, a session of the harness's own holds a REPEATABLE READ snapshot open on the
// payments database, so that no dead row version of the outbox can be removed; the
// relay's throughput and latency before, during and after, and the outbox table's dead
// tuples and size, are measured, and the relay must keep up in every phase.
//
// Start with scenarios.go, which makes the Scenario (cmd/chaos's -long-tx-hold sets
// its hold); longtx.go holds the snapshot, samples the table and computes the figures
// of each phase.
package longtx
