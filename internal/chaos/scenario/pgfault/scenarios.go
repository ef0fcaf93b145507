package pgfault

import (
	"context"
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// PGFaults is the pg-faults scenario: the API's link to PostgreSQL slowed, cut
// mid-transaction and down. short makes fewer faults and a shorter load, for the CI test.
func PGFaults(short bool) harness.Scenario {
	// Spikes long enough that the API's 5 s transaction budget runs out in some
	// (about five round trips of a second each), an outage of 20 s as the course asks.
	pg := &pgFaults{Spikes: 3, SpikeLatency: time.Second, SpikeFor: 3 * time.Second, Cuts: 3, Outage: 20 * time.Second}
	pgSpan := 50 * time.Second
	if short {
		pg.Spikes, pg.Cuts, pg.Outage, pgSpan = 1, 2, 10*time.Second, 30*time.Second
	}
	return harness.Scenario{
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
	}
}

// CommitRefused is the commit-refused scenario: the API's sessions terminated between
// their outbox row and their COMMIT.
func CommitRefused(bool) harness.Scenario {
	refused := &commitRefused{Kills: 10, Latency: 20 * time.Millisecond, Gap: time.Second}
	refusedSpan := 20 * time.Second
	return harness.Scenario{
		Name: "commit-refused",
		Description: "the API reaches PostgreSQL through Toxiproxy (proxy " + devstack.PostgresProxy + ") with +" + refused.Latency.String() + " on every statement it sends and, during a load paced over " + refusedSpan.String() +
			", the harness terminates " + fmt.Sprint(refused.Kills) + " of its sessions at the moment they have written their outbox row and wait for their COMMIT (pg_stat_activity); the API must never answer 201 for a payment whose COMMIT failed",
		Span:                    refusedSpan,
		LoadDelay:               -2 * time.Second, // the load starts first
		APIThroughPostgresProxy: true,
		Disrupt:                 refused.disrupt,
		Validity:                refused.validity,
	}
}

// ConsumerDB is the consumer-db scenario: the consumer's link to its own database
// slowed, its sessions terminated and cut mid-batch, then down. short makes fewer faults
// and a shorter load, for the CI test.
func ConsumerDB(short bool) harness.Scenario {
	// The consumer's database alone: a spike, terminations and cuts of a batch's open
	// transaction (30 ms on each statement keeps one open long enough to be seen), then
	// an outage longer than the consumer's 5 s cap on its retry backoff.
	consumerDB := &consumerDBFaults{SpikeLatency: time.Second, SpikeFor: 4 * time.Second, Kills: 4, Cuts: 3, Outage: 12 * time.Second, ProbeLatency: 30 * time.Millisecond}
	consumerDBSpan := 40 * time.Second
	if short {
		consumerDB.Kills, consumerDB.Cuts, consumerDB.Outage, consumerDBSpan = 3, 2, 8*time.Second, 30*time.Second
	}
	return harness.Scenario{
		Name: "consumer-db",
		Description: "the consumer alone reaches its database through Toxiproxy (proxy " + devstack.ConsumerPostgresProxy + "), the API's database untouched, and, while a load paced over " + consumerDBSpan.String() + " arrives, gets a latency spike of +" + consumerDB.SpikeLatency.String() +
			" per answer for " + consumerDB.SpikeFor.String() + ", then " + fmt.Sprint(consumerDB.Kills) + " of its sessions terminated (pg_terminate_backend) in the middle of a batch's write transaction, then " + fmt.Sprint(consumerDB.Cuts) +
			" cuts of every connection at such a moment, then a " + consumerDB.Outage.String() + " outage; a batch whose transaction failed must be retried, never dead-lettered and never skipped by committing its offsets",
		Span:                         consumerDBSpan,
		LoadDelay:                    -3 * time.Second, // the load starts first
		CopyEvery:                    harness.DefaultCopyEvery,
		ConsumerThroughPostgresProxy: true,
		Disrupt:                      consumerDB.disrupt,
		Validity:                     consumerDB.validity,
	}
}

// DBRestart is the db-restart scenario: the shared PostgreSQL server restarted during
// the load.
func DBRestart(bool) harness.Scenario {
	return harness.Scenario{
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
		CopyEvery: harness.DefaultCopyEvery,
		Validity: func(r *verdict.Report, _ *harness.Run) []verdict.Check {
			return []verdict.Check{harness.PostgresRestartCheck(r), harness.InjectedCheck(r)}
		},
	}
}
