// Package deadletter holds the mechanics of the poison scenario that need not know
// the run they serve: the pager that the relay's dead-letter alerts go to, and the
// sizes of the topic's records as the broker measures them against its limit.
//
// Start with alertsink.go: StartAlertSink listens on a loopback port, Env gives the
// relay the settings that point its signed alerts there, and Received counts the
// verified alerts per dedup_key (the dead-lettered event's id), so that the harness
// can check that every dead letter paged once. recordsizes.go reads the topic back
// (RecordSizes) and sizes each record that had a record batch to itself, from which
// the scenario places the limit that only the poison records exceed.
package deadletter
