// Package clockskew holds the clock-skew scenario: our relay stamps its records ahead
// of now, and for a while the topic's limit on future timestamps is below the skew, so
// the broker refuses every record with INVALID_TIMESTAMP, as it would a relay whose
// host clock ran ahead. The relay must wait it out like an outage: nothing
// dead-lettered, everything delivered once the limit is back.
//
// Start with scenarios.go, which makes the Scenario; clockskew.go holds the disruption
// and its rows.
package clockskew
