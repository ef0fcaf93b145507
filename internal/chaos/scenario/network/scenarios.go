package network

import (
	"context"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// faultCycle is the schedule of default and dual-write: Kafka faulty half of the time.
// short shrinks the windows for the CI test.
func faultCycle(short bool) faults.DutyCycle {
	if short {
		// Still longer than the relay's 3 s publish deadline. A burst lands 1 s into its
		// window, and a payment counts as held back only if it was accepted 2 s before the
		// window's end (harness.HealthyPublishS): 6 s leave its requests 3 s. 5 s are too
		// few on a busy machine: with the API's p90 at 2 s (the race detector, other
		// loads), every payment of the proxy-down burst is accepted too late to count, and
		// the run is INVALID.
		return faults.DutyCycle{Faulty: 6 * time.Second, Clean: 4 * time.Second}
	}
	return faults.DutyCycle{Faulty: 9 * time.Second, Clean: 9 * time.Second}
}

// The course sends 100 payments in parallel. Sent in one burst, they are all drained
// after the first faulty window, and the other kinds of fault never meet an event. So
// the payments go in three bursts of parallel requests, one cycle apart: the load
// starts one second into the first faulty window, so each burst lands one second into
// a faulty window of another kind (acks lost, requests dropped, proxy down), and the
// run proves per kind that the fault bit (harness.FaultChecks): the events of a
// requests-dropped or proxy-down window reach the topic only after it, those of a
// lost-acks window during it. A burst also makes the relay's first batch in a lost-acks
// window large: that batch is the one the broker writes without answering, so it is
// where a relay without an idempotent producer writes duplicates.
const bursts = 3

// burstSpan is the time the three bursts take: one cycle each.
func burstSpan(cycle faults.DutyCycle) time.Duration { return bursts * (cycle.Faulty + cycle.Clean) }

// Default is the course's scenario: Kafka unavailable to the relay about half of the
// time, in three kinds of fault, while the payments arrive in three bursts.
func Default(short bool) harness.Scenario {
	cycle := faultCycle(short)
	span := burstSpan(cycle)
	faultsBit := func(r *verdict.Report, _ *harness.Run) []verdict.Check {
		checks := append(harness.FaultChecks(r, faults.DropAcks, faults.DropRequests, faults.ProxyDown), harness.ProbeCheck(r))
		return append(checks, harness.InjectedCheck(r), harness.OrderInFlightCheck(r))
	}
	return harness.Scenario{
		Name:        "default",
		Description: "the course's scenario: Kafka unavailable to the relay about half of the time (acks lost, requests dropped, proxy down in turn) while 100 payments arrive in three bursts of parallel requests, one per kind of fault, and the relay drains",
		Span:        span,
		Bursts:      bursts,
		LoadDelay:   time.Second,
		CopyEvery:   harness.DefaultCopyEvery,
		Disrupt:     func(ctx context.Context, rn *harness.Run) error { return rn.Faults.Cycle(ctx, cycle) },
		Validity:    faultsBit,
	}
}

// DualWrite is the anti-pattern under Default's faults: the API in its teaching
// dual-write mode, which is expected to lose events.
func DualWrite(short bool) harness.Scenario {
	cycle := faultCycle(short)
	span := burstSpan(cycle)
	return harness.Scenario{
		Name:        "dual-write",
		Description: "the anti-pattern under the default faults: the handler commits the payment, then publishes to Kafka itself and moves on when that fails",
		DualWrite:   true,
		Span:        span,
		Bursts:      bursts,
		LoadDelay:   time.Second,
		CopyEvery:   harness.DefaultCopyEvery,
		Disrupt:     func(ctx context.Context, rn *harness.Run) error { return rn.Faults.Cycle(ctx, cycle) },
		Validity: func(r *verdict.Report, _ *harness.Run) []verdict.Check {
			return []verdict.Check{harness.HeldBackCheck(r), harness.ProbeCheck(r), harness.InjectedCheck(r)}
		},
	}
}

// KafkaDown is the kafka-down scenario: the broker unreachable for a minute while the
// API keeps its published rows only a few seconds.
func KafkaDown(bool) harness.Scenario {
	// A retention a twelfth of the outage, and a cleanup every second: the cleanup runs
	// some 60 times while nothing can be published.
	const outage = 60 * time.Second
	retention := &shortRetention{Retention: 5 * time.Second, Interval: time.Second}
	return harness.Scenario{
		Name: "kafka-down",
		Description: "the broker unreachable for " + outage.String() + " (proxy disabled) in the middle of a load paced over 20 s, while the API keeps its published outbox rows only " + retention.Retention.String() +
			" and cleans up every " + retention.Interval.String() + " (RELAY_RETENTION, RELAY_CLEANUP_INTERVAL): the cleanup runs throughout the outage and must delete nothing unpublished",
		Span:      20 * time.Second,
		LoadDelay: -5 * time.Second, // the load starts first; the outage 5 s into it
		CopyEvery: harness.DefaultCopyEvery,
		APITuning: retention.env(),
		Disrupt: func(ctx context.Context, rn *harness.Run) error {
			return retention.holdOutage(ctx, rn, faults.ProxyDown, outage)
		},
		Validity: func(r *verdict.Report, rn *harness.Run) []verdict.Check {
			overlap := len(r.FaultWindows) > 0 && r.FaultWindows[0].StartS < rn.LoadEndS
			checks := append(harness.FaultChecks(r, faults.ProxyDown), harness.ProbeCheck(r))
			return append(checks,
				verdict.NewCheck(verdict.Validity, "outage began during the load", "true", overlap, overlap),
				retention.check(rn, outage),
				harness.InjectedCheck(r),
				harness.OrderInFlightCheck(r),
			)
		},
	}
}
