// Package poll is the polling relay of the transactional outbox (RELAY_MODE=poll, the
// default): it publishes the events that package outbox's Insert committed, by claiming
// them from the table in batches. Start with Relay.Run (relay.go), then runOnce: one
// batch is one transaction that claims rows (store.go), publishes them (publish.go) and
// records the outcome; the failure path is failure.go, and what wakes an idle worker is
// wakeup.go.
//
// Package cdc is the other relay, reading PostgreSQL's replication stream instead of
// the table; what both share (the rejection rule, the partition breaker, the producer
// options, the mark, the metrics) is in internal/delivery.
package poll
