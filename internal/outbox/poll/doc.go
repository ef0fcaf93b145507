// Package poll is the polling relay of the transactional outbox (RELAY_MODE=poll, the
// default): it publishes the events that package outbox's Insert committed, by claiming
// them from the table in batches. Read it in the order a payment's event goes through
// it: worker.go (a worker wakes for a commit and claims: work, waitForWork), then
// batch.go, which reads top to bottom: one batch is one transaction that claims rows,
// publishes them and moves the acknowledged ones to outbox_published. A record that
// fails takes the failure path (failure.go); a partition that stopped answering is held
// back (partitions.go). relay.go starts and stops the workers.
//
// Package cdc is the other relay, reading PostgreSQL's replication stream instead of
// the table; what both share (the rejection rule, the partition breaker, the producer
// options, the mark, the metrics) is in internal/delivery.
package poll
