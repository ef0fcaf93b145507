package chaos

import (
	"context"
	"slices"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/clockskew"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/cluster"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/crash"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/hostile"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/longtx"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/pgfault"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/poison"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/replicapause"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/storm"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// Scenarios returns every scenario by name. short shrinks the windows for the CI test.
// Each call makes new values: a scenario's faults keep what they saw during a run, so a
// caller takes a fresh one for every run (one per relay mode, one per mutant).
func Scenarios(short bool) map[string]harness.Scenario {
	cycle := faults.DutyCycle{Faulty: 9 * time.Second, Clean: 9 * time.Second}
	if short {
		// Still longer than the relay's 3 s publish deadline. A burst lands 1 s into its
		// window, and a payment counts as held back only if it was accepted 2 s before the
		// window's end (HealthyPublishS): 6 s leave its requests 3 s. 5 s are too few on
		// a busy machine: with the API's p90 at 2 s (the race detector, other loads), every
		// payment of the proxy-down burst is accepted too late to count, and the run is
		// INVALID.
		cycle = faults.DutyCycle{Faulty: 6 * time.Second, Clean: 4 * time.Second}
	}
	// The course sends 100 payments in parallel. Sent in one burst, they are all
	// drained after the first faulty window, and the other kinds of fault never meet an
	// event. So the payments go in three bursts of parallel requests, one cycle apart:
	// the load starts one second into the first faulty window, so each burst lands one
	// second into a faulty window of another kind (acks lost, requests dropped, proxy
	// down), and the run proves per kind that the fault bit (FaultChecks): the events
	// of a requests-dropped or proxy-down window reach the topic only after it, those
	// of a lost-acks window during it. A burst also makes the relay's first batch in a
	// lost-acks window large: that batch is the one the broker writes without
	// answering, so it is where a relay without an idempotent producer writes
	// duplicates.
	span := 3 * (cycle.Faulty + cycle.Clean)
	const bursts = 3
	const copyEvery = harness.DefaultCopyEvery
	faultsBit := func(r *verdict.Report, _ *harness.Run) []verdict.Check {
		checks := append(harness.FaultChecks(r, faults.DropAcks, faults.DropRequests, faults.ProxyDown), harness.ProbeCheck(r))
		return append(checks, harness.InjectedCheck(r), harness.OrderInFlightCheck(r))
	}
	// A retention a twelfth of kafka-down's outage, and a cleanup every second: the
	// cleanup runs some 60 times while nothing can be published.
	const outage = 60 * time.Second
	retention := &shortRetention{Retention: 5 * time.Second, Interval: time.Second}
	return map[string]harness.Scenario{
		"default": {
			Name:        "default",
			Description: "the course's scenario: Kafka unavailable to the relay about half of the time (acks lost, requests dropped, proxy down in turn) while 100 payments arrive in three bursts of parallel requests, one per kind of fault, and the relay drains",
			Span:        span,
			Bursts:      bursts,
			LoadDelay:   time.Second,
			CopyEvery:   copyEvery,
			Disrupt:     func(ctx context.Context, rn *harness.Run) error { return rn.Faults.Cycle(ctx, cycle) },
			Validity:    faultsBit,
		},
		"dual-write": {
			Name:        "dual-write",
			Description: "the anti-pattern under the default faults: the handler commits the payment, then publishes to Kafka itself and moves on when that fails",
			DualWrite:   true,
			Span:        span,
			Bursts:      bursts,
			LoadDelay:   time.Second,
			CopyEvery:   copyEvery,
			Disrupt:     func(ctx context.Context, rn *harness.Run) error { return rn.Faults.Cycle(ctx, cycle) },
			Validity: func(r *verdict.Report, _ *harness.Run) []verdict.Check {
				return []verdict.Check{harness.HeldBackCheck(r), harness.ProbeCheck(r), harness.InjectedCheck(r)}
			},
		},
		"kafka-down": {
			Name: "kafka-down",
			Description: "the broker unreachable for " + outage.String() + " (proxy disabled) in the middle of a load paced over 20 s, while the API keeps its published outbox rows only " + retention.Retention.String() +
				" and cleans up every " + retention.Interval.String() + " (RELAY_RETENTION, RELAY_CLEANUP_INTERVAL): the cleanup runs throughout the outage and must delete nothing unpublished",
			Span:      20 * time.Second,
			LoadDelay: -5 * time.Second, // the load starts first; the outage 5 s into it
			CopyEvery: copyEvery,
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
		},
		"relay-crash":       crash.Relay(short),
		"consumer-crash":    crash.Consumer(short),
		"db-restart":        pgfault.DBRestart(short),
		"replica-pause":     replicapause.Scenario(short),
		"hostile-records":   hostile.Scenario(short),
		"poison":            poison.Scenario(short),
		"pg-faults":         pgfault.PGFaults(short),
		"commit-refused":    pgfault.CommitRefused(short),
		"idempotency-storm": storm.Scenario(short),
		"consumer-db":       pgfault.ConsumerDB(short),
		"long-transaction":  longtx.Scenario(short, 0),
		"clock-skew":        clockskew.Scenario(short),
		"broker-failover":   cluster.BrokerFailover(short),
		"partition-offline": cluster.PartitionOffline(short),
		"rolling-restart":   cluster.RollingRestart(short),
	}
}

// ScenarioNames lists the scenarios in the order `-scenario all` runs them: the outbox
// run first and the dual-write run right after it, for the side-by-side table;
// the cluster scenarios together, on the three-node cluster; db-restart last, because
// it restarts the shared PostgreSQL server.
func ScenarioNames() []string {
	return []string{"default", "dual-write", "kafka-down", "relay-crash", "consumer-crash", "replica-pause", "hostile-records", "clock-skew",
		"poison", "pg-faults", "commit-refused", "idempotency-storm", "consumer-db", "long-transaction", "broker-failover", "partition-offline", "rolling-restart", "db-restart"}
}

// IsScenario reports whether name is a scenario or "all".
func IsScenario(name string) bool {
	return name == "all" || slices.Contains(ScenarioNames(), name)
}
