package scale

// The partitioned alternative for retention, as a benchmark fixture only: the
// history of published events partitioned by day of publication, where retention drops
// whole days instead of deleting rows in batches. It is built from the real table (its
// columns, checks, storage settings and indexes are copied from outbox_published), so
// it follows a change of the real schema without being edited.
//
// The history holds published events only (pending and failed ones stay in
// outbox_events), so no stuck event can hold a day back, and the history has no unique
// index to give up.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const partitionedTable = "outbox_published_by_day"

// createPartitionedCopy creates outbox_published_by_day with one partition for each UTC
// day from `days` days before today through today, copies every row of outbox_published into it
// and then builds the real table's indexes on it (faster than inserting into them; the
// cost of filling is not what is measured).
func createPartitionedCopy(ctx context.Context, pool *pgxpool.Pool, days int) error {
	var storage string
	err := pool.QueryRow(ctx, `SELECT coalesce(array_to_string(reloptions, ', '), '') FROM pg_class WHERE oid = 'outbox_published'::regclass`).Scan(&storage)
	if err != nil {
		return fmt.Errorf("read outbox storage settings: %w", err)
	}
	with := ""
	if storage != "" {
		with = " WITH (" + storage + ")"
	}
	stmts := []string{
		`DROP TABLE IF EXISTS ` + partitionedTable,
		`CREATE TABLE ` + partitionedTable + ` (LIKE outbox_published INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)
			PARTITION BY RANGE (published_at)`,
	}
	today := time.Now().UTC().Truncate(24 * time.Hour)
	for d := days; d >= 0; d-- {
		from := today.AddDate(0, 0, -d)
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')%s`,
			partitionName(from), partitionedTable, from.Format(time.RFC3339), from.AddDate(0, 0, 1).Format(time.RFC3339), with))
	}
	stmts = append(stmts, `INSERT INTO `+partitionedTable+` SELECT * FROM outbox_published`)
	indexes, err := partitionedIndexes(ctx, pool)
	if err != nil {
		return err
	}
	stmts = append(stmts, indexes...)
	for _, stmt := range stmts {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("partitioned copy: %s: %w", firstLine(stmt), err)
		}
	}
	return benchenv.VacuumAnalyze(ctx, pool, partitionedTable)
}

// partitionedIndexes returns the real table's index definitions rewritten for the
// partitioned copy. Unique indexes become plain ones: see the file's comment.
func partitionedIndexes(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, _ := pool.Query(ctx, `SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'outbox_published'::regclass`)
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read outbox indexes: %w", err)
	}
	out := make([]string, len(defs))
	for i, def := range defs {
		def = strings.Replace(def, "CREATE UNIQUE INDEX ", "CREATE INDEX ", 1)
		def = strings.Replace(def, "CREATE INDEX ", "CREATE INDEX by_day_", 1)
		def = strings.Replace(def, " ON public.outbox_published ", " ON "+partitionedTable+" ", 1)
		out[i] = def
	}
	return out, nil
}

// dropDaysBefore is retention by partition: it detaches and drops every day partition
// that ends at or before cutoff, and returns the rows they held. Counting the rows is
// for the report, done before the clock starts.
func dropDaysBefore(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time) (rows int64, took time.Duration, err error) {
	r, _ := pool.Query(ctx, `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass
		  AND (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz <= $2
		ORDER BY c.relname`, partitionedTable, cutoff)
	names, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		return 0, 0, fmt.Errorf("list expired partitions: %w", err)
	}
	for _, name := range names {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+name).Scan(&n); err != nil {
			return 0, 0, fmt.Errorf("count %s: %w", name, err)
		}
		rows += n
	}
	start := time.Now()
	for _, name := range names {
		if _, err := pool.Exec(ctx, `ALTER TABLE `+partitionedTable+` DETACH PARTITION `+name); err != nil {
			return 0, 0, fmt.Errorf("detach %s: %w", name, err)
		}
		if _, err := pool.Exec(ctx, `DROP TABLE `+name); err != nil {
			return 0, 0, fmt.Errorf("drop %s: %w", name, err)
		}
	}
	return rows, time.Since(start), nil
}

func partitionName(day time.Time) string { return partitionedTable + "_" + day.Format("20060102") }

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
