package poll

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// The polling relay's SQL, in one place. A batch is one transaction (ADR 0002): the claim locks
// its rows (SELECT ... FOR UPDATE SKIP LOCKED), the relay publishes them with the
// transaction open and idle, then moves the acknowledged events to outbox_published,
// records the failures, and commits. The row locks are the lease: no other worker can
// claim a row while its batch's transaction lives, and the database itself ends a
// transaction left idle longer than the lease (idle_in_transaction_session_timeout),
// which releases the rows to the other workers and makes the late owner's outcome fail
// with its connection: that is the fencing, done by the server.
//
// The batch commits without waiting for the WAL flush (synchronous_commit = off) unless
// it dead-lettered an event: a crash of PostgreSQL can undo its last few commits, and
// undoing one can only make the relay publish again, never lose an event. Why: the WAL
// is replayed in order, so a crash undoes only the newest commits, never one that an
// fsync already covered, and every ordinary commit (the API's insert of an event)
// flushes all the WAL before it. What is undone, then, is the relay's own progress
// since some moment: events go back to outbox_events, pending, as they were before
// their batch, and are published again. Kafka gets duplicates, which consumers absorb
// by X-Event-Id; per-aggregate order holds by first occurrence, because the successor
// of an undone event had not been claimed in the state the crash went back to
// (durability_test.go).
//
// Queries that return rows ignore Query's error and check CollectRows' instead: pgx
// hands back rows that carry a failed Query's error, and CollectRows returns it
// (pgx's documented idiom), so each query has one error check and one message.

// claimedEvent is an outbox row a worker has leased.
type claimedEvent struct {
	// TID is where the row is (its ctid). It cannot change while the batch's
	// transaction holds the row's lock: only an update of the row or VACUUM FULL moves
	// a row, and both wait for the lock. So the mark finds the row by it without a
	// descent of the primary-key index per event (MarkClaimedSQL).
	TID         pgtype.TID
	ID          uuid.UUID
	Seq         int64
	Type        string
	AggregateID string
	Payload     []byte
	CreatedAt   time.Time
	Attempts    int
	Rejections  int
	// Traceparent is the writer's W3C trace context, "" when it traced nothing.
	Traceparent string
}

type store struct {
	pool *pgxpool.Pool
}

// ClaimSQL locks up to $1 publishable rows for the claiming transaction; see claim.
// Its plan must read the partial index of pending rows (plan_test.go). It is exported,
// with BatchBeginSQL and MarkClaimedSQL, for cmd/bench's SQL ladder, which runs the
// relay's statements without Kafka to price each guarantee in the database alone
// (docs/bench.md).
const ClaimSQL = `
		SELECT e.ctid, e.id, e.seq, e.event_type, e.aggregate_id, e.payload, e.created_at, e.attempts, e.rejections,
		       coalesce(e.traceparent, '')
		FROM outbox_events e
		WHERE e.status = 'pending'
		  AND e.next_attempt_at <= now()
		  AND (NOT e.may_have_predecessor OR NOT EXISTS (
			SELECT 1 FROM outbox_events earlier
			WHERE earlier.aggregate_id = e.aggregate_id
			  AND earlier.seq < e.seq))
		ORDER BY e.next_attempt_at, e.seq
		LIMIT $1
		FOR UPDATE SKIP LOCKED`

// BatchBeginSQL begins a batch's transaction: it commits without waiting for the WAL
// flush, and the database ends it once it has been idle for lease. Both settings last
// until the transaction ends, and travel with the BEGIN in one round trip. The lease is
// a whole number of milliseconds from the configuration, never user input.
func BatchBeginSQL(lease time.Duration) string {
	return fmt.Sprintf("BEGIN; SET LOCAL synchronous_commit = off; SET LOCAL idle_in_transaction_session_timeout = %d",
		lease.Milliseconds())
}

// claim begins a batch: a transaction that locks up to limit publishable rows. A row
// is publishable when it is pending, its backoff has passed, nobody else's batch holds
// it, and no earlier event of its aggregate is still in the outbox (pending, in
// another batch, or failed): that last rule keeps per-aggregate order with any number
// of workers and replicas, and makes a 'failed' event hold back the rest of its
// aggregate until it is replayed. The rule is checked only for rows written while an
// earlier event of their aggregate was in the outbox (may_have_predecessor, set by
// Insert): the others cannot be behind anything, and skipping their probe is most of
// what the claim saves (migrations/payments/00010). The claim takes rows in the order they became due,
// so a row that failed and backed off waits behind the rows committed meanwhile instead
// of holding the head (failure.go). SKIP LOCKED lets concurrent claims pass each other
// instead of queueing on the same rows.
//
// The transaction stays open, idle, while the relay publishes; the database ends it if
// it stays idle longer than lease. It returns a nil transaction when nothing was
// publishable. The caller ends a non-nil one with commit or rollback.
func (s store) claim(ctx context.Context, lease time.Duration, limit int) (pgx.Tx, []claimedEvent, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: BatchBeginSQL(lease)})
	if err != nil {
		return nil, nil, fmt.Errorf("claim outbox events: begin: %w", err)
	}
	rows, _ := tx.Query(ctx, ClaimSQL, limit) // error via CollectRows
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimedEvent, error) {
		var e claimedEvent
		err := row.Scan(&e.TID, &e.ID, &e.Seq, &e.Type, &e.AggregateID, &e.Payload, &e.CreatedAt, &e.Attempts, &e.Rejections, &e.Traceparent)
		return e, err
	})
	if err != nil || len(events) == 0 {
		rollback(tx)
		if err != nil {
			return nil, nil, fmt.Errorf("claim outbox events: %w", err)
		}
		return nil, nil, nil
	}
	return tx, events, nil
}

// MarkClaimedSQL moves the events of the batch's own claim, found by their ctids $1
// (claimedEvent.TID), to outbox_published: the shared mark (delivery.MarkByIDSQL) by
// TID scan instead of an index descent per event.
const MarkClaimedSQL = delivery.MarkByTIDSQL

// markPublished moves the claimed events published, which the broker acknowledged, to
// outbox_published, in the batch's transaction tx, which holds their rows. Every one of
// them must move: fewer would mean that a row was not where the claim found it, which
// the row lock rules out, and the error then rolls the batch back, so that its events
// are published again rather than marked on a guess.
func (s store) markPublished(ctx context.Context, tx pgx.Tx, published []claimedEvent) (int64, error) {
	tids := make([]pgtype.TID, len(published))
	for i, e := range published {
		tids[i] = e.TID
	}
	tag, err := tx.Exec(ctx, MarkClaimedSQL, tids)
	if err != nil {
		return 0, fmt.Errorf("mark outbox events published: %w", err)
	}
	if n := tag.RowsAffected(); n != int64(len(published)) {
		return 0, fmt.Errorf("mark outbox events published: moved %d of the %d claimed rows", n, len(published))
	}
	return tag.RowsAffected(), nil
}

// recordFailures records failed publishes in the batch's transaction tx. Every failure
// sets last_error and counts an attempt, but for an event held back unsent
// (delivery.PartitionBreaker); only a rejection counts towards the DLQ, and the one that
// reaches maxRejections marks the event 'failed' and copies it to outbox_dlq in the
// same statement (why: failure.go). It returns the events it
// dead-lettered, for the alert, and then makes tx wait for the WAL flush at its
// commit: a dead letter raises an alert, and the operator's inbox must not lose an
// entry that someone was told about.
func (s store) recordFailures(ctx context.Context, tx pgx.Tx, failures []failure, maxRejections int) ([]outbox.DeadLetter, error) {
	ids := make([]uuid.UUID, len(failures))
	errs := make([]string, len(failures))
	rejected := make([]bool, len(failures))
	sent := make([]bool, len(failures))
	retrySecs := make([]float64, len(failures))
	for i, f := range failures {
		ids[i], errs[i], rejected[i], sent[i], retrySecs[i] = f.ID, f.Err, f.Rejected, !f.HeldBack, f.RetryIn.Seconds()
	}
	rows, _ := tx.Query(ctx, `
		WITH outcome AS (
			SELECT * FROM unnest($1::uuid[], $2::text[], $3::bool[], $4::float8[], $6::bool[])
				AS o(id, last_error, rejected, retry_secs, sent)
		), updated AS (
			UPDATE outbox_events e
			SET attempts = e.attempts + o.sent::int,
			    rejections = e.rejections + o.rejected::int,
			    last_error = o.last_error,
			    status = CASE WHEN o.rejected AND e.rejections + 1 >= $5 THEN 'failed' ELSE 'pending' END,
			    next_attempt_at = now() + make_interval(secs => o.retry_secs)
			FROM outcome o
			WHERE e.id = o.id
			RETURNING e.id, e.event_type, e.aggregate_id, e.payload, e.attempts, e.last_error, e.status
		)
		INSERT INTO outbox_dlq (event_id, event_type, aggregate_id, payload, attempts, last_error)
		SELECT id, event_type, aggregate_id, payload, attempts, last_error FROM updated
		WHERE status = 'failed'
		ON CONFLICT (event_id) DO UPDATE
			SET attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
			    failed_at = now(), replayed_at = NULL
		RETURNING event_id, event_type, aggregate_id, attempts, last_error, failed_at, replayed_at`,
		ids, errs, rejected, retrySecs, maxRejections, sent)
	dead, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("record publish failures: %w", err)
	}
	if len(dead) > 0 {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on`); err != nil {
			return nil, fmt.Errorf("record publish failures: wait for the flush: %w", err)
		}
	}
	return dead, nil
}

// rollback ends tx without recording anything: its row locks go, and the rows are
// claimable at once. Its error is of no use: a transaction that cannot be rolled back
// is on a broken connection, which the pool discards, and the server rolls it back.
func rollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// rollbackTimeout bounds a rollback, which is one round trip.
const rollbackTimeout = 5 * time.Second

// isLeaseExpired reports whether err says the database ended the batch's transaction
// because it stayed idle longer than the lease (SQLSTATE 25P03).
func isLeaseExpired(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == idleInTransactionSessionTimeout
}

// idleInTransactionSessionTimeout is the SQLSTATE of a session the server ended
// because its transaction stayed idle too long
// (https://www.postgresql.org/docs/15/errcodes-appendix.html).
const idleInTransactionSessionTimeout = "25P03"

// scanDeadLetter reads a row of outbox_dlq as recordFailures returns it.
func scanDeadLetter(row pgx.CollectableRow) (outbox.DeadLetter, error) {
	var d outbox.DeadLetter
	err := row.Scan(&d.EventID, &d.EventType, &d.AggregateID, &d.Attempts, &d.LastError, &d.FailedAt, &d.ReplayedAt)
	return d, err
}
