package pgfailover

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
)

// AsyncScenario is pg-failover-async, the lesson: the same failover with asynchronous
// replication. A COMMIT then returns before the standby has its WAL, so the payments
// committed in the standby's lag are answered 201, published by the relay, decided by
// the consumer, and gone once the standby is promoted. On one machine the lag is well
// under a millisecond; the run stops the standby's WAL receiver LagFor before the kill,
// standing in for a remote standby that falls behind, and judges the loss it shows.
func AsyncScenario(short bool) harness.Scenario {
	f := newFailover(short)
	f.Async, f.LagFor = true, 2*time.Second
	sc := f.scenario("pg-failover-async",
		"pg-failover with asynchronous replication (the lesson): the standby's WAL receiver is stopped "+f.LagFor.String()+
			" before the primary is SIGKILLed, as a remote standby falls behind; the payments answered 201 in that lag are not on the promoted standby, and the verdict counts them")
	sc.LosesAcknowledged = true
	return sc
}

// asynchronous turns synchronous replication off on node 1, the first primary, and
// makes node 2's WAL receiver wait a minute before it reconnects once stopped, so that
// the lag made before the kill is not made up before it.
func (f *failover) asynchronous(ctx context.Context) error {
	for _, step := range []struct {
		node int
		sql  string
	}{
		{1, `ALTER SYSTEM SET synchronous_standby_names = ''`},
		{1, `SELECT pg_reload_conf()`},
		{2, `ALTER SYSTEM SET wal_retrieve_retry_interval = '60s'`},
		{2, `SELECT pg_reload_conf()`},
	} {
		if err := execOn(ctx, f.pair.nodeURL(step.node), step.sql); err != nil {
			return fmt.Errorf("asynchronous replication, node %d: %w", step.node, err)
		}
	}
	return nil
}

// fallBehind stops node 2's WAL receiver (SIGTERM: it exits, and the startup process
// starts a new one only after wal_retrieve_retry_interval): from here on the primary
// commits what the standby will never receive. It records the replication mode the
// primary had, and returns the receiver's pid.
func (f *failover) fallBehind(ctx context.Context) (int, error) {
	var names string
	if err := queryOn(ctx, f.pair.nodeURL(1), `SELECT current_setting('synchronous_standby_names')`, &names); err != nil {
		return 0, err
	}
	var pid int
	if err := queryOn(ctx, f.pair.nodeURL(2), `SELECT coalesce((SELECT pid FROM pg_stat_wal_receiver), 0)`, &pid); err != nil {
		return 0, err
	}
	if pid == 0 {
		return 0, fmt.Errorf("node 2 has no WAL receiver to stop")
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("stop the WAL receiver %d: %w", pid, err)
	}
	f.note(func(r *record) { r.syncNames, r.receiverPID = names, pid })
	return pid, nil
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
