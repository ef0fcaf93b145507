package pgfault

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// A commitRefused is the commit-refused scenario: a write transaction of the API ends
// after its last statement and before its COMMIT reaches the server, so the COMMIT
// fails and nothing of the transaction is committed. The API reaches PostgreSQL through
// the Toxiproxy proxy devstack.PostgresProxy, with Latency added to every byte from the
// API to the server: between the answer to its outbox INSERT and the arrival of its
// COMMIT, each transaction waits Latency, idle in transaction. The harness polls
// pg_stat_activity directly for such a session (a transaction id, idle in transaction,
// its last statement an INSERT into the outbox: a table named like outbox, outbox_events
// or outbox_messages, not the relay's outbox_published or outbox_dlq) and terminates it
// (pg_terminate_backend) at that moment, Kills times. It works black-box on any service
// that writes its outbox row last and reaches PostgreSQL through the proxy.
//
// The API must answer 503 (the outcome of a failed COMMIT is unknown to it; the
// Idempotency-Key makes the retry safe), never a 201: a 201 for a payment that is not
// in the database is the "201 but not committed" part of lost.
type commitRefused struct {
	Kills   int
	Latency time.Duration
	// Gap is the least time between two kills, so that the kills spread over the load.
	Gap time.Duration

	mu sync.Mutex
	// killed describes each terminated session as the server saw it at that moment.
	killed []string
}

const commitLatencyToxic = "chaos_pg_commit_latency"

// idleAfterOutboxInsert finds, and terminates, the sessions of the database that have
// written (a transaction id), wait idle in their transaction, and whose last statement
// was an INSERT into the outbox: the moment after the last statement and before the
// COMMIT.
const idleAfterOutboxInsert = `
	SELECT pid, backend_xid::text, state, pg_terminate_backend(pid)
	FROM pg_stat_activity
	WHERE datname = current_database() AND pid <> pg_backend_pid()
	  AND backend_xid IS NOT NULL AND state = 'idle in transaction'
	  AND query ~* '^\s*insert\s+into\s+("?\w+"?\.)?"?\w*outbox(_events|_messages)?"?\s*\('`

// disrupt delays the API's statements by Latency and terminates sessions between their
// outbox INSERT and their COMMIT, Kills times, Gap apart, then waits for the run to end.
func (c *commitRefused) disrupt(ctx context.Context, rn *harness.Run) error {
	proxy, restore, err := proxyToBreak(rn.Ports, faults.PostgresProxy)
	if err != nil {
		return err
	}
	defer restore()
	watch, err := watchDatabase(ctx, rn.PaymentsDB, "payments")
	if err != nil {
		return err
	}
	defer watch.Close(context.WithoutCancel(ctx))
	if _, err := proxy.AddToxic(commitLatencyToxic, "latency", "upstream", 1, toxiproxy.Attributes{"latency": c.Latency.Milliseconds()}); err != nil {
		return fmt.Errorf("add latency to %s: %w", proxy.Name, err)
	}
	err = c.kill(ctx, rn, watch)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	<-ctx.Done()
	return nil
}

// kill polls every millisecond and terminates the sessions caught before their COMMIT.
func (c *commitRefused) kill(ctx context.Context, rn *harness.Run, watch *pgx.Conn) error {
	for c.count() < c.Kills {
		rows, err := watch.Query(ctx, idleAfterOutboxInsert)
		if err != nil {
			return fmt.Errorf("read pg_stat_activity: %w", err)
		}
		var caught []string
		for rows.Next() {
			var pid int
			var xid, state string
			var terminated bool
			if err := rows.Scan(&pid, &xid, &state, &terminated); err != nil {
				rows.Close()
				return fmt.Errorf("read pg_stat_activity: %w", err)
			}
			if terminated {
				caught = append(caught, fmt.Sprintf("pid %d xid %s %s", pid, xid, state))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("terminate sessions: %w", err)
		}
		wait := time.Millisecond
		if len(caught) > 0 {
			c.mu.Lock()
			c.killed = append(c.killed, caught...)
			n := len(c.killed)
			c.mu.Unlock()
			rn.Disrupted("PostgreSQL session terminated before its COMMIT", fmt.Sprintf("%d of %d: %v", n, c.Kills, caught))
			wait = c.Gap
		}
		if err := backoff.Until(ctx, time.Now().Add(wait)); err != nil {
			return err
		}
	}
	return nil
}

func (c *commitRefused) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.killed)
}

// validity: sessions were ended just before their COMMIT, as the server saw them; then
// the scenario's SLO row.
func (c *commitRefused) validity(r *verdict.Report, _ *harness.Run) []verdict.Check {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := fmt.Sprint(len(c.killed))
	if len(c.killed) > 0 {
		got += fmt.Sprintf(" (first: %s)", c.killed[0])
	}
	return []verdict.Check{
		verdict.NewCheck(verdict.Validity, "transactions ended just before their COMMIT (pg_stat_activity: idle in transaction after the outbox INSERT, terminated)", "> 0", got, len(c.killed) > 0),
		verdict.NewCheck(verdict.SLO, "201 for a payment not committed", "0", r.LostNotCommitted, r.LostNotCommitted == 0),
	}
}
