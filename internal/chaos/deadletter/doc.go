// Package deadletter holds the mechanics of the poison scenario that need not know
// the run they serve: the pager that the relay's dead-letter alerts go to.
//
// Start with alertsink.go: StartAlertSink listens on a loopback port, Env gives the
// relay the settings that point its signed alerts there, and Received counts the
// verified alerts per dedup_key (the dead-lettered event's id), so that the harness
// can check that every dead letter paged once.
package deadletter
