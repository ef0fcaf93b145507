// Package pgfault holds the scenarios that break PostgreSQL under a service that keeps
// working: pg-faults slows, cuts and stops the API's link to its database, commit-refused
// terminates the API's sessions between their outbox row and their COMMIT, consumer-db
// breaks the consumer's link to its own database, and db-restart restarts the server.
// The API must answer 503 with Retry-After, never 201 for a payment it did not commit;
// the consumer must retry a failed batch, never dead-letter or skip it.
//
// Start with scenarios.go, which makes the four Scenarios; pgfaults.go, commitrefused.go
// and consumerdb.go are each scenario's faults and rows. The services reach PostgreSQL
// through the stack's Toxiproxy proxies (faults.PostgresProxy, faults.ConsumerPostgresProxy),
// which the harness puts in front of them when a Scenario asks
// (APIThroughPostgresProxy, ConsumerThroughPostgresProxy); the harness watches
// pg_stat_activity directly, never through them.
package pgfault
