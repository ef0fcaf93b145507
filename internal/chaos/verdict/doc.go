// Package verdict is a chaos run's report: what the run measured, the rows that judge
// it, the verdict they make, and how it is printed and kept as JSON.
//
// Start with report.go: a Report holds the run's counts and its Checks, each of a
// CheckKind (Validity rows before SLO and Contract rows, so that a run that proved
// nothing cannot pass); Judge turns the rows into Pass, Fail or Invalid, PrintTable
// prints them and Write keeps the JSON that package timeline draws. evidence.go holds
// what the harness saw for itself of its faults, storm.go what the idempotency storm's
// clients saw and made, and series.go the timeline sampled during the run, which the
// verdict never reads.
package verdict
