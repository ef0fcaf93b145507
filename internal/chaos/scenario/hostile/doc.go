// Package hostile holds the hostile-records scenario: while the payments arrive, the
// harness writes to the topic itself, as another producer would, records that break the
// record contract and copies of already decided events with another payload. The
// consumer must dead-letter every hostile record, count every copy as a duplicate,
// decide every real payment once, and never stop.
//
// Start with scenarios.go, which makes the Scenario. hostile.go builds the hostile
// records, one kind each; hostilerun.go writes them during the run and records where
// each landed (verify.ForeignRecords, which the verifier leaves out); hostilecheck.go
// reads the consumer's dead letters and decisions for the scenario's rows.
package hostile
