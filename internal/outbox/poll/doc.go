// Package poll is the polling relay of the transactional outbox (RELAY_MODE=poll, the
// default): it publishes the events that package outbox's Insert committed, by claiming
// them from the table in batches. Start with Relay.Run and work (relay.go), then
// batch.go, which reads top to bottom: one batch is one transaction that claims rows,
// publishes them and moves the acknowledged ones to outbox_published (its SQL is in
// store.go). A record that fails takes the failure path (failure.go); what holds back a
// partition that stopped answering is partitions.go, and what wakes an idle worker is
// wakeup.go.
//
// Package cdc is the other relay, reading PostgreSQL's replication stream instead of
// the table; what both share (the rejection rule, the partition breaker, the producer
// options, the mark, the metrics) is in internal/delivery.
package poll
