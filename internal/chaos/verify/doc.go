// Package verify is the black-box verifier of docs/contract.md: what a mentor runs
// against a student's service. It needs only the payments database, the Kafka topic
// (read on the DIRECT listener, never through the faults it judges) and, optionally,
// the consumer's database; it never asks the service anything.
//
// Start with verify.go: New connects, WaitDrain waits for the outbox to empty, and
// Observe reads everything into an Observed, which the harness turns into the rows of
// its verdict. The rest is what Observe reads:
//
//   - schema.go finds which of the contract's optional tables and columns exist;
//   - topic.go reads the topic end to end and checks each record against the record
//     contract, with payloads.go decoding each event type's payload;
//   - order.go reads each payment's committed transitions and the order in which the
//     consumer took its events; totals.go reads the consumer's running totals and
//     computes what they should be;
//   - outboxrows.go reads a relay's outbox rows from outside, in either common layout;
//   - foreign.go holds the records the harness wrote to the topic itself, which the
//     reading leaves out.
package verify
