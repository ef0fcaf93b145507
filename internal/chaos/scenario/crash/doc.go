// Package crash holds the crash scenarios: relay-crash SIGKILLs the API (and its relay)
// in lost-acks windows, consumer-crash SIGKILLs the consumer between its database commit
// and its offset commit; each is restarted on the same database, and the run must
// change nothing.
//
// Start with scenarios.go, which makes both Scenarios. crashes.go holds the kill loops.
// From outside a process the instant that matters cannot be aimed at, only hit by
// chance, so the harness raises the chance: apiwatch.go freezes the API and reads its
// database for a payment committed before its outbox row, and consumerwatch.go freezes
// the consumer and compares its decisions with its group's committed offsets, then
// counts what each death left to redeliver. crashcounts.go tallies the kills for the
// validity rows.
package crash
