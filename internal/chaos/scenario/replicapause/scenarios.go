package replicapause

import (
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
)

// Scenario is the replica-pause scenario: two API replicas on one outbox, one frozen
// past its lease while the other takes its rows over.
func Scenario(bool) harness.Scenario {
	// A pause catches the paused relay between its send and its mark only when it, not
	// the other replica, held the rows seen held: about one pause in two, so three of them.
	pause := replicaPause{Pauses: 3, Pause: 14 * time.Second, Alone: 3 * time.Second, Gap: [2]time.Duration{time.Second, 3 * time.Second}, Claims: &idleClaims{}, late: &lateRows{}}
	pauseSpan := 60 * time.Second
	return harness.Scenario{
		Name: "replica-pause",
		Description: "two API processes (two relays) share one outbox, the load spread over both; with the broker's acks slowed by " + faults.SlowAcksLatency.String() +
			", one replica is SIGSTOPped " + fmt.Sprint(pause.Pauses) + " times while rows are leased, for " + pause.Pause.String() + " (past RELAY_LEASE), while the other takes its rows over; then it resumes alone for " + pause.Alone.String() +
			" with the other frozen: its late outcomes must change nothing (fencing), copies are allowed, and each payment's order must hold; " +
			"our relay also holds one acknowledged batch in ten for " + holdBeforeMark.String() + " before its mark (fault-injection knob RELAY_FAULT_HOLD_BEFORE_MARK, reference service only), so that late marks happen whatever the pauses catch, and no claiming transaction may stay idle past the lease; " +
			"with the CDC relay, which leases nothing, the replica paused is the one streaming from the replication slot, past wal_sender_timeout (" + harness.CDCWalSenderTimeout.String() + "), and the other must take the slot over",
		Replicas:  2,
		APIEnv:    pause.env(),
		Span:      pauseSpan,
		LoadDelay: -2 * time.Second, // the load starts first, so that rows are leased
		CopyEvery: harness.DefaultCopyEvery,
		Disrupt:   pause.disrupt,
		Validity:  pause.validity,
	}
}
