// Package event is the wire contract of the payments.events topic, shared by the code
// that writes it (the outbox relay, the teaching dual write, the benchmarks) and the
// code that reads it (the antifraud consumer, the chaos verifier).
//
// A record on the topic is an [Envelope] (key, headers, timestamp) around a JSON
// payload whose type the X-Event-Type header names: [PaymentCreated] v1 today, the
// rest of a payment's lifecycle later. docs/contract.md describes the same contract
// for readers who do not read Go.
//
// The package depends on nothing of this repository, so a consumer that imports it
// links neither the HTTP handlers nor the relay.
package event

// DefaultTopic is the topic of payment events when none is configured.
const DefaultTopic = "payments.events"

// The record headers of every event.
const (
	// HeaderID carries the event id, a UUID that stays the same across redeliveries:
	// what consumers deduplicate on.
	HeaderID = "X-Event-Id"
	// HeaderType carries the event type, one of the Type* names, which says how to
	// decode the value.
	HeaderType = "X-Event-Type"
	// HeaderOccurredAt carries when the event happened (for PaymentCreated, when the
	// payment was created), RFC 3339 with fractional seconds in UTC. It is event time,
	// unlike the record timestamp, which is the publish time.
	HeaderOccurredAt = "X-Event-Occurred-At"
)
