package antifraud

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// exec runs statements on the bundle's database, e.g. to make it refuse some rows.
func (b *bundle) exec(t *testing.T, sql string) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// A record that passes decodeRecord and that the database still refuses stands for a
// check decodeRecord misses. The CHECK constraint plays that part: the consumer must
// dead-letter that record alone and decide the others of its batch.
func TestRecordTheDatabaseRefusesIsIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.exec(t, `ALTER TABLE decisions ADD CONSTRAINT test_refuses_u_evil CHECK (user_id <> 'u-evil')`)
	good := func() *kgo.Record { return eventRecord(t, uuid.New(), newPayment("u-1", 100, time.Now())) }
	evilID := uuid.New()
	b.produce(t, good(), eventRecord(t, evilID, newPayment("u-evil", 100, time.Now())), good(), good())
	c := b.start(t, b.config())

	// The good records' slice may commit before the isolation starts, so the rows alone
	// do not say that the batch is done: its offsets, committed after it, do.
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, "SELECT count(*) FROM decisions")
		d := b.count(t, "SELECT count(*) FROM consumer_dead_letters")
		o := b.committed(t)[0]
		return n == 3 && d == 1 && o == 4, fmt.Sprintf("%d of 3 decisions, %d of 1 dead letters, offset %d of 4 committed", n, d, o)
	})
	if got, want := deadLetterReasons(t, b), map[int64]string{1: PoisonStoreFailed}; got[1] != want[1] || len(got) != 1 {
		t.Errorf("dead letters by offset = %v, want %v", got, want)
	}
	if got := b.count(t, "SELECT count(*) FROM processed_events WHERE event_id = $1", evilID); got != 0 {
		t.Errorf("dedup rows of the refused event = %d, want 0 (nothing of it may commit)", got)
	}
	if got := testutil.ToFloat64(c.metrics.poison.WithLabelValues(PoisonStoreFailed)); got != 1 {
		t.Errorf("antifraud_poison_total{reason=store_failed} = %v, want 1", got)
	}
	if err := c.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if got := b.committed(t); got[0] != 4 {
		t.Errorf("committed offset after stop = %d, want 4", got[0])
	}
}

// An error of the server, not of the data, must be retried however long it lasts, and
// never dead-letter the record it happened on. The trigger raises admin_shutdown (57P01,
// what pg_ctl stop sends) on one user's decisions and counts its calls in a sequence,
// which, unlike a table, keeps counting in transactions that roll back.
func TestServerErrorIsRetriedNeverDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.exec(t, `
		CREATE SEQUENCE test_shutdown_calls;
		CREATE FUNCTION test_shutdown() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM nextval('test_shutdown_calls');
			RAISE EXCEPTION 'test: the database is shutting down' USING ERRCODE = 'admin_shutdown';
		END $$;
		CREATE TRIGGER test_shutdown BEFORE INSERT ON decisions
			FOR EACH ROW WHEN (NEW.user_id = 'u-unlucky') EXECUTE FUNCTION test_shutdown();`)
	b.produce(t,
		eventRecord(t, uuid.New(), newPayment("u-1", 100, time.Now())),
		eventRecord(t, uuid.New(), newPayment("u-unlucky", 100, time.Now())))
	cfg := b.config()
	cfg.RetryBackoffMax = 100 * time.Millisecond
	c := b.start(t, cfg)

	calls := func() int {
		return b.count(t, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM test_shutdown_calls")
	}
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := calls()
		return n >= 3, fmt.Sprintf("%d attempts at the batch, want 3", n)
	})
	if got := b.count(t, "SELECT count(*) FROM consumer_dead_letters"); got != 0 {
		t.Errorf("dead letters during the outage = %d, want 0", got)
	}

	// The server is back: the same records go through, the unlucky one decided.
	b.exec(t, `DROP TRIGGER test_shutdown ON decisions`)
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, "SELECT count(*) FROM decisions")
		return n == 2, fmt.Sprintf("%d of 2 decisions", n)
	})
	if got := b.count(t, "SELECT count(*) FROM consumer_dead_letters"); got != 0 {
		t.Errorf("dead letters = %d, want 0", got)
	}
	if err := c.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func TestIsDataError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "22021"}, true}, // character_not_in_repertoire: a NUL in text
		{&pgconn.PgError{Code: "22P05"}, true}, // untranslatable_character: \u0000 in jsonb
		{&pgconn.PgError{Code: "23514"}, true}, // check_violation
		{&pgconn.PgError{Code: "54000"}, true}, // program_limit_exceeded: index row too large
		{fmt.Errorf("insert decisions: %w", &pgconn.PgError{Code: "22003"}), true},
		{&pgconn.PgError{Code: "08006"}, false}, // connection_failure
		{&pgconn.PgError{Code: "57P01"}, false}, // admin_shutdown
		{&pgconn.PgError{Code: "57014"}, false}, // query_canceled: statement_timeout
		{&pgconn.PgError{Code: "40001"}, false}, // serialization_failure
		{&pgconn.PgError{Code: "40P01"}, false}, // deadlock_detected
		{&pgconn.PgError{Code: "53300"}, false}, // too_many_connections
		{&pgconn.PgError{Code: "42P01"}, false}, // undefined_table: our bug, not the record's
		{context.DeadlineExceeded, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := isDataError(tt.err); got != tt.want {
			t.Errorf("isDataError(%v) = %t, want %t", tt.err, got, tt.want)
		}
	}
}

// TestIsolationHalvesTheBatch: a poll of 64 records, one of which the database refuses, is
// split in halves down to that record, in about 2·log2(64) batches of at most two
// transactions (Parallelism): far fewer than one transaction per record. A statement
// trigger counts the dedup inserts (one per transaction) in a sequence, which keeps
// counting in the transactions that roll back.
func TestIsolationHalvesTheBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.exec(t, `ALTER TABLE decisions ADD CONSTRAINT test_refuses_u_evil CHECK (user_id <> 'u-evil')`)
	b.exec(t, `CREATE SEQUENCE test_dedup_inserts`)
	b.exec(t, `CREATE FUNCTION test_count_insert() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM nextval('test_dedup_inserts'); RETURN NULL; END $$`)
	b.exec(t, `CREATE TRIGGER test_count_insert AFTER INSERT ON processed_events
		FOR EACH STATEMENT EXECUTE FUNCTION test_count_insert()`)
	records := make([]*kgo.Record, 64)
	for i := range records {
		user := fmt.Sprintf("u-%d", i)
		if i == 41 {
			user = "u-evil"
		}
		records[i] = eventRecord(t, uuid.New(), newPayment(user, 100, time.Now()))
	}
	c := b.newConsumer(t, b.config())
	ctx := context.Background()
	_, err := c.processBatch(ctx, b.positioned(records...))
	if !isDataError(err) {
		t.Fatalf("processBatch of the whole poll = %v, want a data error", err)
	}
	res, err := c.isolate(ctx, records, err)
	if err != nil {
		t.Fatalf("isolate: %v", err)
	}
	if len(res.poison) != 1 || res.poison[0].offset != 41 {
		t.Errorf("dead letters = %+v, want the record at offset 41 alone", res.poison)
	}
	if n := b.count(t, "SELECT count(*) FROM decisions"); n != 63 {
		t.Errorf("decisions = %d, want the 63 others", n)
	}
	// 1 batch of 2 transactions, then 2 batches per level of 6 halvings, each of at most
	// 2: 26 at most, and one by one would be 64.
	if n := b.count(t, "SELECT last_value FROM test_dedup_inserts"); n > 26 {
		t.Errorf("dedup inserts = %d, want at most 26 (halving), not one per record", n)
	}
}
