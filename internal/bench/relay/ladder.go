package relay

// The SQL ladder: what each guarantee of the relay costs in the database alone.
// Each rung drains the same backlog with the same workers and batches, and no Kafka at
// all (a batch is "published" the moment it is claimed), so the only difference between
// two rungs is the SQL one of them adds:
//
//	floor           the floor's table and loop (minimal.go): lock a batch, set a flag
//	floor + order   the same, plus the order rule per aggregate (NOT EXISTS on an index)
//	ours, no history  our schema and claim, but the mark deletes the events instead of
//	                moving them: what the history costs (GET /payments/{id}, operators)
//	ours            our schema, our claim and our mark (internal/outbox): order, event id,
//	                retries' columns, the history of published events for GET /payments/{id}
//	ours, mark by id  ours with the mark finding rows by event id (an index descent per
//	                event) instead of by the ctids the claim returned
//	ours, probe every row  ours with the claim as it was before migration 00010: the
//	                order rule probed for every candidate row, not only for rows written
//	                behind another event of their aggregate
//	first design    our relay's first design (ladder_first.go): a lease written by
//	                the claim and a mark that updates the row in place, each in its own
//	                transaction
//
// It measures with the drain of the relay benchmark (measure.MeasureDrain): events per second
// and WAL per event, around the drain only.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/measure"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/benchreport"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/outbox/cdc"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
	"github.com/dscourse/payments-outbox/migrations"
)

type ladderConfig struct {
	backlog, reps, workers, batch int
	report                        string
}

// A ladderRung is one relay of the ladder: a table and a batch function, run by
// workers loops until stopped.
type ladderRung struct {
	key, name string
	// setup prepares the rung's empty database.
	setup func(ctx context.Context, dbURL string) error
	table ladderTable
	// batch claims and marks up to n events in the database, and returns how many.
	batch   func(ctx context.Context, pool *pgxpool.Pool, n int) (int, error)
	workers int
	size    int
}

// ladderTable is the part of a measure.Relay that a rung takes from the table it
// drains.
type ladderTable interface {
	Fill(ctx context.Context, pool *pgxpool.Pool, n int) error
	Pending(ctx context.Context, pool *pgxpool.Pool) (bool, error)
}

func (r ladderRung) Fill(ctx context.Context, pool *pgxpool.Pool, n int) error {
	return r.table.Fill(ctx, pool, n)
}

func (r ladderRung) Pending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	return r.table.Pending(ctx, pool)
}

func (ladderRung) Insert(context.Context, pgx.Tx, string, []byte) error {
	return errors.New("the SQL ladder measures drains only")
}

// Start runs the rung's workers, each claiming and marking batches until stopped,
// polling every millisecond when it finds nothing.
func (r ladderRung) Start(ctx context.Context, pool *pgxpool.Pool, _ string) (*measure.Running, error) {
	return measure.GoRun(ctx, func() {}, func(ctx context.Context) error {
		errs := make(chan error, r.workers)
		for range r.workers {
			go func() {
				for ctx.Err() == nil {
					n, err := r.batch(ctx, pool, r.size)
					if err != nil && ctx.Err() == nil {
						errs <- err
						return
					}
					if n == 0 {
						select {
						case <-ctx.Done():
						case <-time.After(time.Millisecond):
						}
					}
				}
				errs <- nil
			}()
		}
		var first error
		for range r.workers {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}), nil
}

// Ladder runs the SQL ladder with the flags in args (-h lists them) and merges its
// figures into the report.
func Ladder(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench ladder", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var cfg ladderConfig
	fs.IntVar(&cfg.backlog, "backlog", 100_000, "events in each drain's backlog")
	fs.IntVar(&cfg.reps, "reps", 3, "repetitions; each figure is their median, with min and max")
	fs.IntVar(&cfg.workers, "workers", 4, "concurrent loops per rung, as RELAY_WORKERS")
	fs.IntVar(&cfg.batch, "batch", 1000, "rows per claim, as RELAY_BATCH_SIZE")
	fs.StringVar(&cfg.report, "report", benchreport.Path, "JSON report to merge the figures into")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("parse flags: %w", err)
	}
	env, err := benchenv.OpenPostgres(ctx, getenv)
	if err != nil {
		return err
	}
	defer env.Close()

	rungs := ladderRungs(cfg)
	urls := make([]string, len(rungs))
	for i, r := range rungs {
		url, drop, err := env.CreateDatabase(ctx, "bench_ladder")
		if err != nil {
			return err
		}
		defer drop()
		if err := r.setup(ctx, url); err != nil {
			return fmt.Errorf("%s: set up: %w", r.name, err)
		}
		urls[i] = url
	}
	results := make([]benchreport.Samples, len(rungs))
	wal := make([]benchreport.Samples, len(rungs))
	records := make([]benchreport.Samples, len(rungs))
	var load benchreport.Samples
	for rep := 1; rep <= cfg.reps; rep++ {
		load = append(load, benchenv.LoadAverage())
		fmt.Fprintf(stdout, "repetition %d (load average %.2f)\n", rep, load[len(load)-1])
		for i, r := range rungs {
			d, err := measure.MeasureDrain(ctx, r, measure.DrainSetup{Admin: env.Admin, DBURL: urls[i], Backlog: cfg.backlog})
			if err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			results[i] = append(results[i], d.EventsPerSecond)
			wal[i] = append(wal[i], d.Cost.WALBytes)
			records[i] = append(records[i], d.Cost.WALRecords)
			fmt.Fprintf(stdout, "  %-16s %8.0f events/s  %6.1f µs per event  %6.0f WAL bytes, %.2f WAL records per event\n",
				r.name, d.EventsPerSecond, 1e6/d.EventsPerSecond, d.Cost.WALBytes, d.Cost.WALRecords)
		}
	}
	report := map[string]any{
		"ladder_bench_backlog":     cfg.backlog,
		"ladder_bench_reps":        cfg.reps,
		"ladder_bench_workers":     cfg.workers,
		"ladder_bench_batch_size":  cfg.batch,
		"ladder_bench_measured_at": time.Now().UTC().Format(time.RFC3339),
		"ladder_bench_note": "SQL only, no Kafka: each rung drains the backlog with the same workers and batches; " +
			"floor = the floor's table and loop; floor_order = plus the order rule per aggregate; ours_no_history = our schema and claim, the mark a plain delete; ours = our schema, claim and mark; ours_mark_by_id = ours with the mark by event id instead of ctid; ours_probe_every_row = ours with the order rule probed for every candidate (the claim before migration 00010); " +
			"first_design = our relay's first design (lease in columns, mark in place); medians with _min, _max; WAL is server-wide",
	}
	load.AddTo(report, "ladder_bench_load_avg_1m", benchreport.Hundredths)
	for i, r := range rungs {
		results[i].AddTo(report, "ladder_"+r.key+"_events_per_s", benchreport.Tenths)
		wal[i].AddTo(report, "ladder_"+r.key+"_wal_bytes_per_event", benchreport.Tenths)
		records[i].AddTo(report, "ladder_"+r.key+"_wal_records_per_event", benchreport.Hundredths)
	}
	fmt.Fprintln(stdout, "medians:")
	for i, r := range rungs {
		fmt.Fprintf(stdout, "  %-16s %8.0f events/s  %6.1f µs per event  %.2f WAL records per event\n",
			r.name, results[i].Median(), 1e6/results[i].Median(), records[i].Median())
	}
	if err := benchreport.Merge(cfg.report, report); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "merged into %s\n", cfg.report)
	return nil
}

// ladderRungs are the rungs, cheapest first.
func ladderRungs(cfg ladderConfig) []ladderRung {
	rung := func(key, name string, setup func(context.Context, string) error, table ladderTable,
		batch func(context.Context, *pgxpool.Pool, int) (int, error)) ladderRung {
		return ladderRung{key: key, name: name, setup: setup, table: table, batch: batch, workers: cfg.workers, size: cfg.batch}
	}
	migrate := func(ctx context.Context, dbURL string) error {
		return devstack.MigrateDatabase(ctx, dbURL, migrations.Payments)
	}
	return []ladderRung{
		rung("floor", "floor", sqlSetup(floorTableSQL), floorRelay{}, floorSQLBatch(false)),
		rung("floor_order", "floor + order", sqlSetup(floorTableSQL+`;
			CREATE INDEX floor_events_key_idx ON floor_events (key, id) WHERE NOT published`), floorRelay{}, floorSQLBatch(true)),
		rung("ours_no_history", "ours, no history", migrate, measure.OutboxTable{}, ourSQLBatch(poll.ClaimSQL, `DELETE FROM outbox_events WHERE ctid = ANY($1::tid[])`, byTID)),
		rung("ours", "ours", migrate, measure.OutboxTable{}, ourSQLBatch(poll.ClaimSQL, poll.MarkClaimedSQL, byTID)),
		rung("ours_mark_by_id", "ours, mark by id", migrate, measure.OutboxTable{}, ourSQLBatch(poll.ClaimSQL, cdc.MarkPublishedSQL, byID)),
		rung("ours_probe_every_row", "ours, probe all", migrate, measure.OutboxTable{}, ourSQLBatch(claimProbingEveryRowSQL, poll.MarkClaimedSQL, byTID)),
		// The first design's table has the name and pending rows of ours.
		rung("first_design", "first design", sqlSetup(firstDesignTableSQL), measure.OutboxTable{}, firstDesignBatch),
	}
}

func sqlSetup(sql string) func(context.Context, string) error {
	return func(ctx context.Context, dbURL string) error { return benchenv.ExecOnce(ctx, dbURL, sql) }
}

// floorSQLBatch is floorBatch without the produce; withOrder adds the order rule.
func floorSQLBatch(withOrder bool) func(context.Context, *pgxpool.Pool, int) (int, error) {
	order := ""
	if withOrder {
		order = `AND NOT EXISTS (SELECT 1 FROM floor_events earlier
			WHERE earlier.key = e.key AND NOT earlier.published AND earlier.id < e.id)`
	}
	return func(ctx context.Context, pool *pgxpool.Pool, n int) (int, error) {
		return floorBatch(ctx, pool, n, order, nil)
	}
}

// markBy says what a rung's mark statement takes as $1: the claimed rows' ctids (our
// relay's mark since it finds rows by them) or their event ids (the mark before).
type markBy bool

const (
	byTID markBy = false
	byID  markBy = true
)

// ourSQLBatch is our relay's batch (internal/outbox store.go) without the produce: the
// same transaction settings, claim as the claim statement (which must return the
// columns of poll.ClaimSQL), and mark as the mark statement, given the claimed rows'
// ctids or ids.
func ourSQLBatch(claim, mark string, by markBy) func(context.Context, *pgxpool.Pool, int) (int, error) {
	return func(ctx context.Context, pool *pgxpool.Pool, n int) (int, error) {
		return ourSQLBatchWith(ctx, pool, n, claim, mark, by)
	}
}

func ourSQLBatchWith(ctx context.Context, pool *pgxpool.Pool, n int, claim, mark string, by markBy) (int, error) {
	var claimed int
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{BeginQuery: poll.BatchBeginSQL(30 * time.Second)},
		func(tx pgx.Tx) error {
			rows, _ := tx.Query(ctx, claim, n)
			got, err := pgx.CollectRows(rows, scanClaimedRow)
			if err != nil || len(got) == 0 {
				return err
			}
			claimed = len(got)
			tids := make([]pgtype.TID, len(got))
			ids := make([]uuid.UUID, len(got))
			for i, row := range got {
				tids[i], ids[i] = row.tid, row.id
			}
			if by == byID {
				_, err = tx.Exec(ctx, mark, ids)
			} else {
				_, err = tx.Exec(ctx, mark, tids)
			}
			return err
		})
	return claimed, err
}

// claimedRow is where a claimed row is and its event id.
type claimedRow struct {
	tid pgtype.TID
	id  uuid.UUID
}

// scanClaimedRow reads a row of our claim's columns (poll.ClaimSQL: ctid first).
func scanClaimedRow(row pgx.CollectableRow) (claimedRow, error) {
	var r claimedRow
	var seq int64
	var typ, aggregate, traceparent string
	var payload []byte
	var createdAt time.Time
	var attempts, rejections int
	return r, row.Scan(&r.tid, &r.id, &seq, &typ, &aggregate, &payload, &createdAt, &attempts, &rejections, &traceparent)
}

// claimProbingEveryRowSQL is poll.ClaimSQL as it was before migration 00010: the order
// rule's probe runs for every candidate row, including the rows other batches hold
// (the probe comes before the lock), and every row written with nothing before it.
var claimProbingEveryRowSQL = strings.Replace(poll.ClaimSQL,
	"(NOT e.may_have_predecessor OR NOT EXISTS (", "(NOT EXISTS (", 1)
