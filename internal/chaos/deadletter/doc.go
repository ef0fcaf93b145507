// Package deadletter holds the mechanics of the dead-letter scenarios (poison,
// dlq-replay) that need not know the run they serve: the operator who replays dead
// letters, the pager that the relay's dead-letter alerts go to, and the sizes of the
// topic's records as the broker measures them against its limit.
//
// Start with admin.go: an Admin holds the token of our API's /admin/ endpoints (Env)
// and replays a dead letter through one API process (Replay). alertsink.go:
// StartAlertSink listens on a loopback port, Env gives the relay the settings that
// point its signed alerts there, and Received counts the verified alerts per dedup_key
// (the dead-lettered event's id), so that the harness can check that every dead letter
// paged once. recordsizes.go reads the topic back (RecordSizes) and sizes each record
// that had a record batch to itself, from which the poison scenario places the limit
// that only the poison records exceed.
package deadletter
