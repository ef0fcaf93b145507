package benchenv

// The outbox rows the benchmarks start from, each kind made by one function here, and
// the outbox's size read by one function: the only code of the scale benchmark that
// knows the outbox's schema. When the schema changes, these are what to change. The
// outbox holds the events still to publish (outbox_events) and the published ones apart
// (outbox_published, written once by the relay's mark).

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// FillBacklog empties the outbox and commits n pending events of n distinct payments:
// what a relay finds after an outage of n events. Each is its payment's first event, so
// it is written as outbox.Insert writes one: may_have_predecessor false (00010). Its ids
// (event and payment) are UUIDv7 of the moment each row is written, as the API's are
// (uuid.NewV7), so that the relay's mark inserts into the history's aggregate index
// where the API's events would: at its right edge, not all over it.
// The history of earlier drains stays: the relay never reads it.
func FillBacklog(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if _, err := pool.Exec(ctx, `TRUNCATE outbox_events`); err != nil {
		return fmt.Errorf("truncate outbox: %w", err)
	}
	_, err := pool.Exec(ctx, `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload, created_at, next_attempt_at, may_have_predecessor)
		SELECT `+uuidV7SQL("clock_timestamp()")+`, 'PaymentCreated', p.id::text, `+BacklogPayloadSQL+`, now(), now(), false
		FROM (SELECT `+uuidV7SQL("clock_timestamp()")+` AS id, i FROM generate_series(1, $1) AS i) p`, n)
	if err != nil {
		return fmt.Errorf("insert outbox backlog: %w", err)
	}
	return VacuumAnalyze(ctx, pool, "outbox_events")
}

// FillBacklogOneEventPerTransaction is FillBacklog with each event committed in a
// transaction of its own, as the API commits them: the shape of a backlog left by an
// outage of the relay, where FillBacklog's single transaction is the shape of a bulk
// import. The commits skip the wait for the WAL flush (synchronous_commit off, each
// transaction's own setting): only what a relay then reads is measured, not the fill.
func FillBacklogOneEventPerTransaction(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if _, err := pool.Exec(ctx, `TRUNCATE outbox_events`); err != nil {
		return fmt.Errorf("truncate outbox: %w", err)
	}
	// A DO block may commit between its statements when it runs outside a transaction
	// block, which Exec without arguments (the simple protocol) does.
	_, err := pool.Exec(ctx, `DO $$ BEGIN FOR i IN 1..`+strconv.Itoa(n)+` LOOP
		PERFORM set_config('synchronous_commit', 'off', true);
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload, created_at, next_attempt_at, may_have_predecessor)
		SELECT `+uuidV7SQL("clock_timestamp()")+`, 'PaymentCreated', p.id::text, `+BacklogPayloadSQL+`, now(), now(), false
		FROM (SELECT `+uuidV7SQL("clock_timestamp()")+` AS id, i) p;
		COMMIT;
	END LOOP; END $$`)
	if err != nil {
		return fmt.Errorf("insert outbox backlog one event per transaction: %w", err)
	}
	return VacuumAnalyze(ctx, pool, "outbox_events")
}

// FillHistory empties the outbox and fills it with n published events of n distinct
// payments, created (and published 50 ms later) at even intervals over the `days` whole
// UTC days before today: the history a relay works beside, and that a cleaner with a
// retention of whole days removes one day at a time. Rows go in in creation order, as
// the API would have written them, and their ids (event and payment) are UUIDv7 of
// their creation time, as the API's are (uuid.NewV7): each insert lands at the right
// edge of the indexes on them, which is also what makes 10,000,000 rows fill in minutes
// rather than in an hour of random index pages.
func FillHistory(ctx context.Context, pool *pgxpool.Pool, n, days int) error {
	if _, err := pool.Exec(ctx, `TRUNCATE outbox_events, outbox_published`); err != nil {
		return fmt.Errorf("truncate outbox: %w", err)
	}
	_, err := pool.Exec(ctx, `
		INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, published_at)
		SELECT `+uuidV7SQL("p.at")+`, p.i, 'PaymentCreated', p.id::text, `+BacklogPayloadSQL+`, 0, 0,
		       p.at, p.at + interval '50 milliseconds'
		FROM (SELECT `+uuidV7SQL("t.at")+` AS id, t.i, t.at
		      FROM (SELECT i, date_trunc('day', now()) - make_interval(days => $2) + (i - 1) * (make_interval(days => $2) / $1::float8) AS at
		            FROM generate_series(1, $1) AS i) t) p`, n, days)
	if err != nil {
		return fmt.Errorf("insert outbox history: %w", err)
	}
	return VacuumAnalyze(ctx, pool, "outbox_published")
}

// uuidV7SQL is a UUIDv7-like id for the time at (an SQL expression): the first 48 bits
// are its Unix milliseconds, the rest random (the version bits stay 4's; nothing reads
// them). The API benchmark's pgbench script builds its ids the same way.
func uuidV7SQL(at string) string {
	return `encode(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send((extract(epoch FROM ` + at +
		`) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 'hex')::uuid`
}

// outboxTables are the tables that hold the outbox's rows, pending and published.
var outboxTables = []string{"outbox_events", "outbox_published"}

// TableSizes are bytes on disk.
type TableSizes struct {
	Table, Indexes float64 // heap (with TOAST and maps), and every index
}

// OutboxSizes returns what the outbox's tables and their indexes weigh. For a
// partitioned table, pass its partitions' parent: the partitions are summed.
func OutboxSizes(ctx context.Context, pool *pgxpool.Pool, tables ...string) (TableSizes, error) {
	if len(tables) == 0 {
		tables = outboxTables
	}
	var s TableSizes
	err := pool.QueryRow(ctx, `
		SELECT coalesce(sum(pg_table_size(rel)), 0)::float8, coalesce(sum(pg_indexes_size(rel)), 0)::float8
		FROM (SELECT t.relid AS rel FROM unnest($1::regclass[]) AS root, pg_partition_tree(root) AS t WHERE t.isleaf
		      UNION
		      SELECT c.oid FROM unnest($1::regclass[]) AS root JOIN pg_class c ON c.oid = root WHERE c.relkind = 'r') AS leaves`, tables).Scan(&s.Table, &s.Indexes)
	if err != nil {
		return s, fmt.Errorf("read outbox sizes: %w", err)
	}
	return s, nil
}

// BacklogPayloadSQL builds, for row p of a backlog, the payload of a PaymentCreated
// event of the size the API writes, so that every table carries the same bytes.
const BacklogPayloadSQL = `jsonb_build_object('payment_id', p.id, 'user_id', 'u-' || (p.i % 1000),
		'amount', 1000 + p.i % 9000, 'currency', 'EUR', 'created_at', now())`

// VacuumAnalyze runs VACUUM (ANALYZE) on a freshly filled table. ANALYZE gives the
// planner the backlog's real size; the VACUUM keeps autovacuum's insert threshold from
// firing during the drain, where its WAL would be billed to the relay being measured.
func VacuumAnalyze(ctx context.Context, pool *pgxpool.Pool, table string) error {
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) `+table); err != nil {
		return fmt.Errorf("vacuum %s: %w", table, err)
	}
	return nil
}
