package testenv

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// standbySlot is the physical replication slot a private primary keeps for its
// standby, so that it holds the WAL the standby has not received yet.
const standbySlot = "standby"

// standbyName is the application_name the standby connects to its primary with, the
// one name in the primary's synchronous_standby_names.
const standbyName = "standby"

// NewPrivateStandby starts a hot standby of primary (a server of NewPrivatePostgres) on
// a port of its own: a base backup taken through the physical slot "standby", streaming
// replication from it, and the primary then waiting for the standby at every commit
// (synchronous_standby_names names it), so that a commit the primary acknowledged is
// on the standby too. '*' would not do: it matches any walsender, a CDC relay's
// logical replication connection too, whose feedback could then acknowledge a commit
// the standby has not got. It is removed when the test ends.
//
// The standby's own configuration does not wait for any standby: once promoted
// (Promote), it commits on its own, as a new primary with no standby yet must.
func NewPrivateStandby(tb testing.TB, primary *PrivatePostgres) *PrivatePostgres {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := primary.exec(ctx, fmt.Sprintf(
		`SELECT pg_create_physical_replication_slot('%s') WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '%[1]s')`,
		standbySlot)); err != nil {
		tb.Fatalf("standby slot on the primary: %v", err)
	}
	sb := newPrivate(tb, ctx, func(pg *PrivatePostgres) error {
		// -R writes standby.signal and primary_conninfo, with the connection's
		// application_name; -S streams through the slot, which then stays in use by the
		// standby's WAL receiver.
		out, err := pg.asOwner(ctx, filepath.Join(pg.bin, "pg_basebackup"), "-D", pg.data,
			"-d", primary.URL+"&application_name="+standbyName, // URL has ?sslmode already
			"-X", "stream", "-S", standbySlot, "-R", "--no-sync", "-c", "fast").CombinedOutput()
		if err != nil {
			return fmt.Errorf("pg_basebackup: %w\n%s", err, out)
		}
		return nil
	})
	// Only now, with the standby's configuration already copied, does the primary wait
	// for it: the standby must not inherit the setting.
	if err := primary.exec(ctx,
		fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = '"%s"'`, standbyName),
		`SELECT pg_reload_conf()`); err != nil {
		tb.Fatalf("synchronous replication on the primary: %v", err)
	}
	WaitFor(tb, 30*time.Second, func() (bool, string) {
		state, err := primary.query(ctx, fmt.Sprintf(
			`SELECT coalesce((SELECT sync_state FROM pg_stat_replication WHERE application_name = '%s'), 'none')`, standbyName))
		if err != nil {
			return false, err.Error()
		}
		return state == "sync", fmt.Sprintf("the standby's replication is %q on the primary, want sync", state)
	})
	return sb
}

// Crash stops the server as a crash would: `pg_ctl stop -m immediate` ends every
// process at once, with no shutdown checkpoint and every connection cut. It returns
// once the server is gone.
func (pg *PrivatePostgres) Crash(ctx context.Context) error {
	return pg.ctl(ctx, "-m", "immediate", "-w", "-t", "30", "stop")
}

// Promote ends a standby's recovery (`pg_ctl promote`): it becomes a primary on a new
// timeline and accepts writes. It returns once the server does.
func (pg *PrivatePostgres) Promote(ctx context.Context) error {
	return pg.ctl(ctx, "-w", "-t", "60", "promote")
}

// exec runs each statement on the admin database, in its own autocommit.
func (pg *PrivatePostgres) exec(ctx context.Context, stmts ...string) error {
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// query returns the one text value of a one-row query.
func (pg *PrivatePostgres) query(ctx context.Context, sql string) (string, error) {
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var s string
	err = conn.QueryRow(ctx, sql).Scan(&s)
	return s, err
}

// MultiHostURL is the URL of database dbName on servers, every one listed, for a client
// that must follow the primary: pgx tries the hosts in order and keeps the first that
// accepts writes (target_session_attrs=read-write), so after a promotion a new
// connection finds the new primary, wherever it is in the list. connect_timeout bounds
// the try of a host that does not answer.
func MultiHostURL(dbName string, servers ...*PrivatePostgres) string {
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = s.Addr
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		strings.Join(hosts, ","), dbName)
}
