package pgfailover

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
)

// AsyncScenario is pg-failover-async, the lesson: the same failover with asynchronous
// replication. A COMMIT then returns before the standby has its WAL, so the payments
// committed in the standby's lag are answered 201, published by the relay, decided by
// the consumer, and gone once the standby is promoted. On one machine the lag is well
// under a millisecond; the run cuts the standby off LagFor before the kill,
// standing in for a remote standby that falls behind, and judges the loss it shows.
func AsyncScenario(short bool) harness.Scenario {
	f := newFailover(short)
	f.Async, f.LagFor = true, 2*time.Second
	sc := f.scenario("pg-failover-async",
		"pg-failover with asynchronous replication (the lesson): the standby is cut off from the primary's WAL "+f.LagFor.String()+
			" before the primary is SIGKILLed, as a remote standby falls behind; the payments answered 201 in that lag are not on the promoted standby, and the verdict counts them")
	sc.LosesAcknowledged = true
	return sc
}

// asynchronous turns synchronous replication off on node 1, the first primary.
func (f *failover) asynchronous(ctx context.Context) error {
	for _, sql := range []string{`ALTER SYSTEM SET synchronous_standby_names = ''`, `SELECT pg_reload_conf()`} {
		if err := execOn(ctx, f.pair.nodeURL(1), sql); err != nil {
			return fmt.Errorf("asynchronous replication on node 1: %w", err)
		}
	}
	return nil
}

// fallBehind cuts node 2 off from the primary's WAL: its primary_conninfo is pointed at
// a port nothing listens on and reloaded, which ends its WAL receiver, and every new
// one fails to connect. (Stopping the receiver alone is not enough: the startup process
// starts another at once, and a SIGSTOPped one reads what the kernel buffered when it
// resumes.) From here on the primary commits what the standby never receives. It
// records the replication mode the primary had and the receiver that was streaming.
func (f *failover) fallBehind(ctx context.Context) (int, error) {
	var names string
	if err := queryOn(ctx, f.pair.nodeURL(1), `SELECT current_setting('synchronous_standby_names')`, &names); err != nil {
		return 0, err
	}
	pid, err := f.streamingReceiver(ctx)
	if err != nil {
		return 0, err
	}
	if pid == 0 {
		return 0, fmt.Errorf("node 2 has no WAL receiver streaming")
	}
	closed, err := stack.FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := strings.Cut(closed, ":")
	cut := fmt.Sprintf(`ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=%s user=postgres application_name=standby connect_timeout=1'`, port)
	for _, sql := range []string{cut, `SELECT pg_reload_conf()`} {
		if err := execOn(ctx, f.pair.nodeURL(2), sql); err != nil {
			return 0, fmt.Errorf("cut node 2 off: %w", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for streaming := pid; streaming != 0; {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("node 2 still streaming 10 s after its primary_conninfo was cut")
		}
		if err := backoff.Until(ctx, time.Now().Add(20*time.Millisecond)); err != nil {
			return 0, err
		}
		if streaming, err = f.streamingReceiver(ctx); err != nil {
			return 0, err
		}
	}
	f.note(func(r *record) { r.syncNames, r.receiverPID = names, pid })
	return pid, nil
}

// streamingReceiver is the pid of node 2's WAL receiver while it streams, 0 when none.
func (f *failover) streamingReceiver(ctx context.Context) (int, error) {
	var pid int
	err := queryOn(ctx, f.pair.nodeURL(2), `SELECT coalesce((SELECT pid FROM pg_stat_wal_receiver WHERE status = 'streaming'), 0)`, &pid)
	return pid, err
}

// primaryLSN is node 1's WAL insert position, read just before the kill: a lower bound
// of what it had written.
func (f *failover) primaryLSN(ctx context.Context) (string, error) {
	var lsn string
	err := queryOn(ctx, f.pair.nodeURL(1), `SELECT pg_current_wal_lsn()::text`, &lsn)
	return lsn, err
}

// missingBytes is how much of node 1's WAL, up to lsn, node 2 never received.
func (f *failover) missingBytes(ctx context.Context, lsn string) (int64, error) {
	var n int64
	err := queryOn(ctx, f.pair.nodeURL(2),
		`SELECT greatest(pg_wal_lsn_diff($1::pg_lsn, coalesce(pg_last_wal_receive_lsn(), '0/0')), 0)::bigint`, &n, lsn)
	return n, err
}

func execOn(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

func queryOn(ctx context.Context, url, sql string, dest any, args ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}
