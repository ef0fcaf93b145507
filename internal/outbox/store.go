package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The relay's SQL, in one place. Every statement runs on its own (autocommit, or a
// transaction of that one statement), so no transaction or row lock is ever held while
// the relay waits on Kafka.
//
// The relay's bookkeeping (claim, mark, release) commits without waiting for the WAL
// flush (withoutFlushWait): a crash of PostgreSQL can undo its last few commits, and
// undoing them can only make the relay publish again, never lose an event (ADR 0002).
//
// Queries that return rows ignore Query's error and check CollectRows' instead: pgx
// hands back rows that carry a failed Query's error, and CollectRows returns it
// (pgx's documented idiom), so each query has one error check and one message.

// claimedEvent is an outbox row a worker has leased.
type claimedEvent struct {
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

// claimSQL leases up to $3 publishable rows to token $1 for $2 seconds; see claim.
// Its plan must read the partial index of pending rows (plan_test.go).
const claimSQL = `
		UPDATE outbox_events
		SET lease_token = $1, lease_expires_at = now() + make_interval(secs => $2)
		WHERE id IN (
			SELECT e.id FROM outbox_events e
			WHERE e.status = 'pending'
			  AND e.next_attempt_at <= now()
			  AND (e.lease_expires_at IS NULL OR e.lease_expires_at < now())
			  AND NOT EXISTS (
				SELECT 1 FROM outbox_events earlier
				WHERE earlier.aggregate_id = e.aggregate_id
				  AND earlier.status <> 'published'
				  AND earlier.seq < e.seq)
			ORDER BY e.next_attempt_at, e.seq
			LIMIT $3
			FOR UPDATE SKIP LOCKED)
		RETURNING id, seq, event_type, aggregate_id, payload, created_at, attempts, rejections, coalesce(traceparent, '')`

// deletePublishedSQL deletes at most $2 rows published more than $1 seconds ago; see
// deletePublished. Its plan must read the partial index on published_at (plan_test.go).
const deletePublishedSQL = `
		DELETE FROM outbox_events
		WHERE id IN (
			SELECT id FROM outbox_events
			WHERE status = 'published' AND published_at < now() - make_interval(secs => $1)
			LIMIT $2)`

// claim leases up to limit publishable rows to token in one statement (River's shape).
// A row is publishable when it is pending, its backoff has passed, nobody holds a live
// lease on it, and no earlier event of its aggregate is unfinished: that last rule
// keeps per-aggregate order with any number of workers, and makes a 'failed' event
// hold back the rest of its aggregate until it is replayed. The claim takes rows in
// the order they became due, so a row that failed and backed off waits behind the
// rows committed meanwhile instead of holding the head (failure.go). SKIP LOCKED lets
// concurrent claims pass each other instead of queueing on the same rows.
func (s store) claim(ctx context.Context, token uuid.UUID, lease time.Duration, limit int) ([]claimedEvent, error) {
	var events []claimedEvent
	err := s.withoutFlushWait(ctx, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, claimSQL, token, lease.Seconds(), limit) // error via CollectRows
		var err error
		events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimedEvent, error) {
			var e claimedEvent
			err := row.Scan(&e.ID, &e.Seq, &e.Type, &e.AggregateID, &e.Payload, &e.CreatedAt, &e.Attempts, &e.Rejections, &e.Traceparent)
			return e, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim outbox events: %w", err)
	}
	return events, nil
}

// markPublished records that the broker acknowledged ids. The lease token fences it:
// if the lease expired and another worker claimed the rows, this changes nothing and
// the newer owner's outcome stands. It returns how many rows it marked.
func (s store) markPublished(ctx context.Context, token uuid.UUID, ids []uuid.UUID) (int64, error) {
	var marked int64
	err := s.withoutFlushWait(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE outbox_events
			SET status = 'published', published_at = now(), last_error = NULL,
			    lease_token = NULL, lease_expires_at = NULL
			WHERE id = ANY($2) AND lease_token = $1`,
			token, ids)
		marked = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("mark outbox events published: %w", err)
	}
	return marked, nil
}

// recordFailures records failed publishes, fenced by the lease token like
// markPublished. It waits for the WAL flush: a dead letter raises an alert, and the
// operator's inbox must not lose an entry that someone was told about. Every failure counts an attempt and sets last_error; only a rejection
// counts towards the DLQ, and the one that reaches maxRejections marks the event
// 'failed' and copies it to outbox_dlq in the same statement (why: failure.go). It
// returns the events it dead-lettered, for the alert.
func (s store) recordFailures(ctx context.Context, token uuid.UUID, failures []failure, maxRejections int) ([]DeadLetter, error) {
	ids := make([]uuid.UUID, len(failures))
	errs := make([]string, len(failures))
	rejected := make([]bool, len(failures))
	retrySecs := make([]float64, len(failures))
	for i, f := range failures {
		ids[i], errs[i], rejected[i], retrySecs[i] = f.ID, f.Err, f.Rejected, f.RetryIn.Seconds()
	}
	rows, _ := s.pool.Query(ctx, `
		WITH outcome AS (
			SELECT * FROM unnest($2::uuid[], $3::text[], $4::bool[], $5::float8[])
				AS o(id, last_error, rejected, retry_secs)
		), updated AS (
			UPDATE outbox_events e
			SET attempts = e.attempts + 1,
			    rejections = e.rejections + o.rejected::int,
			    last_error = o.last_error,
			    status = CASE WHEN o.rejected AND e.rejections + 1 >= $6 THEN 'failed' ELSE 'pending' END,
			    next_attempt_at = now() + make_interval(secs => o.retry_secs),
			    lease_token = NULL, lease_expires_at = NULL
			FROM outcome o
			WHERE e.id = o.id AND e.lease_token = $1
			RETURNING e.id, e.event_type, e.aggregate_id, e.payload, e.attempts, e.last_error, e.status
		)
		INSERT INTO outbox_dlq (event_id, event_type, aggregate_id, payload, attempts, last_error)
		SELECT id, event_type, aggregate_id, payload, attempts, last_error FROM updated
		WHERE status = 'failed'
		ON CONFLICT (event_id) DO UPDATE
			SET attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
			    failed_at = now(), replayed_at = NULL
		RETURNING event_id, event_type, aggregate_id, attempts, last_error, failed_at, replayed_at`,
		token, ids, errs, rejected, retrySecs, maxRejections)
	dead, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("record publish failures: %w", err)
	}
	return dead, nil
}

// release gives up the leases of token without recording an outcome, so another
// worker can claim the rows at once instead of after the lease expires.
func (s store) release(ctx context.Context, token uuid.UUID) error {
	err := s.withoutFlushWait(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
			UPDATE outbox_events SET lease_token = NULL, lease_expires_at = NULL
			WHERE lease_token = $1 AND status = 'pending'`, token)
		return err
	})
	if err != nil {
		return fmt.Errorf("release outbox leases: %w", err)
	}
	return nil
}

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

// deletePublished deletes at most limit rows published more than retention ago.
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
			    next_attempt_at = now(), lease_token = NULL, lease_expires_at = NULL
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

// withoutFlushWait runs fn in a transaction that commits without waiting for its WAL
// to reach the disk (synchronous_commit = off, for this transaction only; the SET
// travels with the BEGIN, in one round trip). The commit is visible to everyone at
// once, as any other; only its durability waits for the WAL writer, at most about
// three wal_writer_delay (600 ms by default).
//
// Only the relay's bookkeeping may use it. Why a crash that undoes such a commit can
// only cause a republish, never a loss (ADR 0002): the WAL is replayed in order, so a
// crash undoes only the newest commits, never one that an fsync already covered, and
// every ordinary commit (the API's insert of an event) flushes all the WAL before it.
// What is undone, then, is the relay's own progress since some moment: rows go back to
// the state they had then, which the relay had already been in and handles: a row
// whose mark is undone is pending under a lease, and is published again when the
// lease ends; a row whose claim is undone is pending, and another worker may publish
// it while its first owner still does, whose late mark the token then fences. Kafka
// gets duplicates, which consumers absorb by X-Event-Id; per-aggregate order holds by
// first occurrence, because the successor of an undone mark had not been claimed in
// the state the crash went back to.
func (s store) withoutFlushWait(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL synchronous_commit = off"}, fn)
}

func scanDeadLetter(row pgx.CollectableRow) (DeadLetter, error) {
	var d DeadLetter
	err := row.Scan(&d.EventID, &d.EventType, &d.AggregateID, &d.Attempts, &d.LastError, &d.FailedAt, &d.ReplayedAt)
	return d, err
}
