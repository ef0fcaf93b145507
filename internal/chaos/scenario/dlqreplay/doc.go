// Package dlqreplay holds the dlq-replay scenario: dead letters and their replays in
// the middle of the load, while the same payments keep getting new events, with two
// API replicas and the replays sent through the one whose relay does not publish.
//
// For a few windows the topic refuses every record as too large, and the relay, with
// RELAY_MAX_REJECTIONS=1, dead-letters each event it sends meanwhile. Between the
// windows the harness replays every dead letter through the second replica's admin
// endpoint, as an operator would, while the load goes on taking the same payments
// through their lifecycle, one step every few seconds. Each payment's events must still
// reach the topic and the consumer in their sequence, every dead letter must be
// delivered under its own event id, and the users' totals must come out right.
//
// With the CDC relay the first replica streams from the replication slot (the harness
// arranges it before the load) and the second only waits for it, so a replay through
// the second replica reaches the streaming relay at its next look for replays, seconds
// later: an event of the payment committed meanwhile must not overtake the replay.
//
// Start with scenarios.go, which makes the Scenario, then dlqreplay.go: the refusal
// windows, the arrangement of the stream and the settling after the load. replayer.go
// watches the outbox for dead letters and replays them; rows.go turns what the harness
// saw into the verdict's rows.
package dlqreplay
