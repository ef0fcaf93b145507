package outbox

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
)

// The relay's SQL, in one place. A batch is one transaction (ADR 0002): the claim locks
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
	// descent of the primary-key index per event (markClaimedSQL).
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

// DeadLetter is an event that the broker rejected too often, as the DLQ keeps it.
type DeadLetter struct {
	EventID     uuid.UUID  `json:"event_id"`
	EventType   string     `json:"event_type"`
	AggregateID string     `json:"aggregate_id"`
	Attempts    int        `json:"attempts"`
	LastError   string     `json:"last_error"`
	FailedAt    time.Time  `json:"failed_at"`
	ReplayedAt  *time.Time `json:"replayed_at,omitempty"`
}

type store struct {
	pool *pgxpool.Pool
}

// claimSQL locks up to $1 publishable rows for the claiming transaction; see claim.
// Its plan must read the partial index of pending rows (plan_test.go).
const claimSQL = `
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

// batchBeginSQL begins a batch's transaction: it commits without waiting for the WAL
// flush, and the database ends it once it has been idle for lease. Both settings last
// until the transaction ends, and travel with the BEGIN in one round trip. The lease is
// a whole number of milliseconds from the configuration, never user input.
func batchBeginSQL(lease time.Duration) string {
	return fmt.Sprintf("BEGIN; SET LOCAL synchronous_commit = off; SET LOCAL idle_in_transaction_session_timeout = %d",
		lease.Milliseconds())
}

// markPublishedSQL moves the events $1, which the broker acknowledged, from the outbox
// to its history, in one statement; see markPublished. Only pending rows move: a row
// that is failed stays in the outbox (the CDC relay marks rows it does not lock).
const markPublishedSQL = `
		WITH moved AS (
			DELETE FROM outbox_events WHERE id = ANY($1) AND status = 'pending'
			` + moveToHistorySQL

// markClaimedSQL is markPublishedSQL for the rows of the batch's own claim, found by
// their ctids $1 (claimedEvent.TID): a TID scan instead of an index descent per event.
const markClaimedSQL = `
		WITH moved AS (
			DELETE FROM outbox_events WHERE ctid = ANY($1::tid[])
			` + moveToHistorySQL

// moveToHistorySQL is the rest of both marks: the deleted rows go to outbox_published.
const moveToHistorySQL = `RETURNING id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent
		)
		INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent)
		SELECT id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent FROM moved`

// deletePublishedSQL deletes at most $2 rows published more than $1 seconds ago; see
// deletePublished. Its plan must read the partial index on published_at (plan_test.go).
const deletePublishedSQL = `
		DELETE FROM outbox_published
		WHERE ctid IN (
			SELECT ctid FROM outbox_published
			WHERE published_at < now() - make_interval(secs => $1)
			LIMIT $2)`

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
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: batchBeginSQL(lease)})
	if err != nil {
		return nil, nil, fmt.Errorf("claim outbox events: begin: %w", err)
	}
	rows, _ := tx.Query(ctx, claimSQL, limit) // error via CollectRows
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
	tag, err := tx.Exec(ctx, markClaimedSQL, tids)
	if err != nil {
		return 0, fmt.Errorf("mark outbox events published: %w", err)
	}
	if n := tag.RowsAffected(); n != int64(len(published)) {
		return 0, fmt.Errorf("mark outbox events published: moved %d of the %d claimed rows", n, len(published))
	}
	return tag.RowsAffected(), nil
}

func markPublished(ctx context.Context, q Execer, ids []uuid.UUID) (int64, error) {
	tag, err := q.Exec(ctx, markPublishedSQL, ids)
	if err != nil {
		return 0, fmt.Errorf("mark outbox events published: %w", err)
	}
	return tag.RowsAffected(), nil
}

// recordFailures records failed publishes in the batch's transaction tx. Every failure
// sets last_error and counts an attempt, but for an event held back unsent (breaker.go); only a rejection counts towards the DLQ, and
// the one that reaches maxRejections marks the event 'failed' and copies it to
// outbox_dlq in the same statement (why: failure.go). It returns the events it
// dead-lettered, for the alert, and then makes tx wait for the WAL flush at its
// commit: a dead letter raises an alert, and the operator's inbox must not lose an
// entry that someone was told about.
func (s store) recordFailures(ctx context.Context, tx pgx.Tx, failures []failure, maxRejections int) ([]DeadLetter, error) {
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

// pendingStats counts pending events and returns the age of the oldest one (zero when
// none). Both come from the partial index on pending rows (an index-only scan: the index
// carries enqueued_at), and the age from the
// database's clock alone: now() - enqueued_at, never created_at, which is the API
// host's clock (migrations/payments/00008_outbox_enqueued_at.sql).
func (s store) pendingStats(ctx context.Context) (count int64, oldestAge time.Duration, err error) {
	var ageSeconds float64
	err = s.pool.QueryRow(ctx, `
		SELECT count(*), coalesce(extract(epoch FROM now() - min(enqueued_at)), 0)
		FROM outbox_events WHERE status = 'pending'`).Scan(&count, &ageSeconds)
	if err != nil {
		return 0, 0, fmt.Errorf("count pending outbox events: %w", err)
	}
	return count, time.Duration(ageSeconds * float64(time.Second)), nil
}

// deletePublished deletes at most limit events published more than retention ago.
func (s store) deletePublished(ctx context.Context, retention time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, deletePublishedSQL,
		retention.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete published outbox events: %w", err)
	}
	return tag.RowsAffected(), nil
}

// listDeadLetters returns the newest DLQ entries first, at most limit.
func (s store) listDeadLetters(ctx context.Context, limit int) ([]DeadLetter, error) {
	rows, _ := s.pool.Query(ctx, `
		SELECT event_id, event_type, aggregate_id, attempts, last_error, failed_at, replayed_at
		FROM outbox_dlq ORDER BY failed_at DESC LIMIT $1`, limit)
	dead, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return dead, nil
}

// errNotDeadLettered means replay found no failed event with that id.
var errNotDeadLettered = errors.New("no failed event with this id")

// replay sends a failed event back to the outbox as pending, with its attempts reset
// and its id unchanged (consumers deduplicate on it), and marks its DLQ row replayed.
func (s store) replay(ctx context.Context, eventID uuid.UUID) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE outbox_events
			SET status = 'pending', attempts = 0, rejections = 0, last_error = NULL,
			    next_attempt_at = now()
			WHERE id = $1 AND status = 'failed'`, eventID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errNotDeadLettered
		}
		_, err = tx.Exec(ctx, `UPDATE outbox_dlq SET replayed_at = now() WHERE event_id = $1`, eventID)
		return err
	})
	if err != nil {
		return fmt.Errorf("replay event %s: %w", eventID, err)
	}
	return nil
}

func scanDeadLetter(row pgx.CollectableRow) (DeadLetter, error) {
	var d DeadLetter
	err := row.Scan(&d.EventID, &d.EventType, &d.AggregateID, &d.Attempts, &d.LastError, &d.FailedAt, &d.ReplayedAt)
	return d, err
}
