package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/clockskew"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/cluster"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/crash"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/hostile"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/longtx"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/poison"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/replicapause"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/storm"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/devstack"
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
	// Spikes long enough that the API's 5 s transaction budget runs out in some
	// (about five round trips of a second each), an outage of 20 s as the course asks.
	pg := &pgFaults{Spikes: 3, SpikeLatency: time.Second, SpikeFor: 3 * time.Second, Cuts: 3, Outage: 20 * time.Second}
	pgSpan := 50 * time.Second
	refused := &commitRefused{Kills: 10, Latency: 20 * time.Millisecond, Gap: time.Second}
	refusedSpan := 20 * time.Second
	// The consumer's database alone: a spike, terminations and cuts of a batch's open
	// transaction (30 ms on each statement keeps one open long enough to be seen), then
	// an outage longer than the consumer's 5 s cap on its retry backoff.
	consumerDB := &consumerDBFaults{SpikeLatency: time.Second, SpikeFor: 4 * time.Second, Kills: 4, Cuts: 3, Outage: 12 * time.Second, ProbeLatency: 30 * time.Millisecond}
	consumerDBSpan := 40 * time.Second
	if short {
		pg.Spikes, pg.Cuts, pg.Outage, pgSpan = 1, 2, 10*time.Second, 30*time.Second
		consumerDB.Kills, consumerDB.Cuts, consumerDB.Outage, consumerDBSpan = 3, 2, 8*time.Second, 30*time.Second
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
		"relay-crash":    crash.Relay(short),
		"consumer-crash": crash.Consumer(short),
		"db-restart": {
			Name:        "db-restart",
			Description: "PostgreSQL restarted (fast shutdown) during a load paced over 20 s; the API answers 503 and the clients retry with the same Idempotency-Key",
			Span:        20 * time.Second,
			LoadDelay:   -6 * time.Second,
			Disrupt: func(ctx context.Context, rn *harness.Run) error {
				rn.Disrupted("PostgreSQL restart begins", "")
				if err := rn.Stack.RestartPostgres(ctx); err != nil {
					return err
				}
				rn.Disrupted("PostgreSQL restart done", "")
				return nil
			},
			CopyEvery: copyEvery,
			Validity: func(r *verdict.Report, _ *harness.Run) []verdict.Check {
				return []verdict.Check{harness.PostgresRestartCheck(r), harness.InjectedCheck(r)}
			},
		},
		"replica-pause":   replicapause.Scenario(short),
		"hostile-records": hostile.Scenario(short),
		"poison":          poison.Scenario(short),
		"pg-faults": {
			Name: "pg-faults",
			Description: "the API and its relay reach PostgreSQL through Toxiproxy (proxy " + devstack.PostgresProxy + ") and, while a load paced over " + pgSpan.String() + " arrives, get " + fmt.Sprint(pg.Spikes) + " latency spikes of +" + pg.SpikeLatency.String() +
				" per answer, then " + fmt.Sprint(pg.Cuts) + " cuts of every connection at a moment the API holds a write transaction, then a " + pg.Outage.String() + " outage; " +
				"the API must answer 503 with Retry-After and never a 201 for a payment it did not commit, the clients retry with the same Idempotency-Key, and nothing committed may be lost or committed twice",
			Span:                    pgSpan,
			LoadDelay:               -3 * time.Second, // the load starts first
			APIThroughPostgresProxy: true,
			// A client that keeps retrying for about a minute, longer than the outage plus
			// the slow answers around it: the default 10 attempts (about 24 s of backoff)
			// ran out for one payment of a full run, with every answer a correct 503.
			MaxAttempts: 20,
			Disrupt:     pg.disrupt,
			Validity:    pg.validity,
		},
		"commit-refused": {
			Name: "commit-refused",
			Description: "the API reaches PostgreSQL through Toxiproxy (proxy " + devstack.PostgresProxy + ") with +" + refused.Latency.String() + " on every statement it sends and, during a load paced over " + refusedSpan.String() +
				", the harness terminates " + fmt.Sprint(refused.Kills) + " of its sessions at the moment they have written their outbox row and wait for their COMMIT (pg_stat_activity); the API must never answer 201 for a payment whose COMMIT failed",
			Span:                    refusedSpan,
			LoadDelay:               -2 * time.Second, // the load starts first
			APIThroughPostgresProxy: true,
			Disrupt:                 refused.disrupt,
			Validity:                refused.validity,
		},
		"idempotency-storm": storm.Scenario(short),
		"consumer-db": {
			Name: "consumer-db",
			Description: "the consumer alone reaches its database through Toxiproxy (proxy " + devstack.ConsumerPostgresProxy + "), the API's database untouched, and, while a load paced over " + consumerDBSpan.String() + " arrives, gets a latency spike of +" + consumerDB.SpikeLatency.String() +
				" per answer for " + consumerDB.SpikeFor.String() + ", then " + fmt.Sprint(consumerDB.Kills) + " of its sessions terminated (pg_terminate_backend) in the middle of a batch's write transaction, then " + fmt.Sprint(consumerDB.Cuts) +
				" cuts of every connection at such a moment, then a " + consumerDB.Outage.String() + " outage; a batch whose transaction failed must be retried, never dead-lettered and never skipped by committing its offsets",
			Span:                         consumerDBSpan,
			LoadDelay:                    -3 * time.Second, // the load starts first
			CopyEvery:                    copyEvery,
			ConsumerThroughPostgresProxy: true,
			Disrupt:                      consumerDB.disrupt,
			Validity:                     consumerDB.validity,
		},
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
