// Package faults holds the harness's network faults that need not know the run they
// serve: a Toxiproxy proxy broken on a deterministic schedule, and copies of real
// records injected into the topic.
//
// Start with faults.go: New finds a Toxiproxy proxy, Inject and Clear apply one Kind of
// fault to it (dropped requests, lost acks, slow acks, the proxy down), and Cycle and
// Hold run them on a schedule, recording each Window; the harness's own probe through
// the proxy is the evidence that a window bit. copies.go follows the topic live
// (TopicWatch) and writes exact copies of some records back, so that the consumer's
// dedup is exercised whatever the relay does.
package faults
