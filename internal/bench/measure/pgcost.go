package measure

// The physical cost of a drain: WAL bytes and records, WAL flushes and
// commits, read from PostgreSQL's statistics before and after, divided by the events.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PGCost is what the database did, in total or per event.
//
// walBytes comes from pg_current_wal_lsn(), exact at once; walRecords, walFPI and
// walSyncs from pg_stat_wal. walFPI counts full-page images: the first change to a
// page after a checkpoint writes the whole 8 kB page, so a checkpoint that starts just
// before a drain adds up to 8 kB per page touched to walBytes, which says more about
// the checkpoint's timing than about the relay (docs/bench.md). All three are for the whole server: on a quiet machine that is the
// benchmark alone, on a busy one the neighbours' WAL is counted too. commits is
// pg_stat_database.xact_commit of the benchmark's database only, read-only transactions
// included; walSyncs is the WAL flushes (fsyncs) that commits waited for.
type PGCost struct {
	WALBytes, WALRecords, WALFPI, WALSyncs, Commits float64
}

func (c PGCost) Minus(o PGCost) PGCost {
	return PGCost{c.WALBytes - o.WALBytes, c.WALRecords - o.WALRecords, c.WALFPI - o.WALFPI,
		c.WALSyncs - o.WALSyncs, c.Commits - o.Commits}
}

func (c PGCost) Per(events float64) PGCost {
	return PGCost{c.WALBytes / events, c.WALRecords / events, c.WALFPI / events, c.WALSyncs / events, c.Commits / events}
}

// quiesceTimeout bounds the wait for a database's clients to disconnect.
const quiesceTimeout = 10 * time.Second

// readPGCounters waits until no client is connected to dbName, so that every backend
// that worked there has reported its statistics (a backend reports them when it exits
// at the latest), and reads the server's counters through admin.
func readPGCounters(ctx context.Context, admin *pgxpool.Pool, dbName string) (PGCost, error) {
	if err := waitNoClients(ctx, admin, dbName); err != nil {
		return PGCost{}, err
	}
	var c PGCost
	err := admin.QueryRow(ctx, `
		SELECT (pg_current_wal_lsn() - '0/0')::float8, w.wal_records::float8, w.wal_fpi::float8, w.wal_sync::float8,
		       d.xact_commit::float8
		FROM pg_stat_wal w, pg_stat_database d
		WHERE d.datname = $1`, dbName).Scan(&c.WALBytes, &c.WALRecords, &c.WALFPI, &c.WALSyncs, &c.Commits)
	if err != nil {
		return PGCost{}, fmt.Errorf("read WAL and commit statistics: %w", err)
	}
	return c, nil
}

// waitNoClients polls pg_stat_activity until no client backend is connected to dbName.
// Autovacuum workers are not clients and are not waited for.
func waitNoClients(ctx context.Context, admin *pgxpool.Pool, dbName string) error {
	ctx, cancel := context.WithTimeout(ctx, quiesceTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var clients int
		err := admin.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND backend_type = 'client backend'`, dbName).Scan(&clients)
		if err != nil {
			return fmt.Errorf("count clients of %s: %w", dbName, err)
		}
		if clients == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d clients still connected to %s after %s", clients, dbName, quiesceTimeout)
		case <-tick.C:
		}
	}
}

// databaseName is the database that dbURL names.
func databaseName(dbURL string) (string, error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	return cfg.Database, nil
}
