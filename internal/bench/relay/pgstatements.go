package relay

// Per-statement figures from pg_stat_statements, when the server loads it.

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statementsLoaded reports whether the server loads pg_stat_statements, which it can
// only do from its start (shared_preload_libraries).
func statementsLoaded(ctx context.Context, admin *pgxpool.Pool) (bool, error) {
	var loaded bool
	err := admin.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'`).Scan(&loaded)
	if err != nil {
		return false, fmt.Errorf("read shared_preload_libraries: %w", err)
	}
	return loaded, nil
}

// printStatements prints the ten statements of dbURL's database that took the most
// time since benchenv.ResetStatements, with their time and WAL per published event.
func printStatements(ctx context.Context, stdout io.Writer, dbURL, relay string, events int) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	rows, _ := pool.Query(ctx, `
		SELECT calls, total_exec_time, rows, wal_bytes::float8, wal_fpi, shared_blks_hit, shared_blks_read,
		       left(regexp_replace(query, '\s+', ' ', 'g'), 110)
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC
		LIMIT 10`)
	type statement struct {
		calls       int64
		totalMillis float64
		rows        int64
		walBytes    float64
		walFPI      int64 // full-page images: see measure.PGCost
		hit, read   int64
		query       string
	}
	stmts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (statement, error) {
		var s statement
		err := row.Scan(&s.calls, &s.totalMillis, &s.rows, &s.walBytes, &s.walFPI, &s.hit, &s.read, &s.query)
		return s, err
	})
	if err != nil {
		return fmt.Errorf("read pg_stat_statements: %w", err)
	}
	fmt.Fprintf(stdout, "pg_stat_statements, drain of %d events, %s (the benchmark's own checks for \"drained\" included):\n", events, relay)
	fmt.Fprintf(stdout, "  %8s %10s %9s %9s %10s %8s %10s %9s  %s\n", "calls", "total ms", "µs/event", "rows", "WAL B/evt", "FPI", "blks hit", "blks read", "query")
	for _, s := range stmts {
		fmt.Fprintf(stdout, "  %8d %10.1f %9.2f %9d %10.1f %8d %10d %9d  %s\n", s.calls, s.totalMillis,
			s.totalMillis*1000/float64(events), s.rows, s.walBytes/float64(events), s.walFPI, s.hit, s.read, strings.TrimSpace(s.query))
	}
	return nil
}
