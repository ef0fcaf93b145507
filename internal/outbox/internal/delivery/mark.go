package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Both relays move what Kafka acknowledged from outbox_events to outbox_published with
// the same statement, and read the backlog with the same query: GET /payments/{id}, the
// cleaner, operators' queries and the dashboards see one layout in both modes.

// MarkByIDSQL moves the events $1, which the broker acknowledged, from the outbox to
// its history, in one statement (MarkPublished). Only pending rows move: a row that is
// failed stays in the outbox (the CDC relay marks rows it does not lock).
const MarkByIDSQL = `
		WITH moved AS (
			DELETE FROM outbox_events WHERE id = ANY($1) AND status = 'pending'
			` + moveToHistorySQL

// MarkByTIDSQL is MarkByIDSQL for rows the caller's transaction holds locked, found by
// their ctids $1: a TID scan instead of an index descent per event. The polling relay
// marks its claimed rows with it.
const MarkByTIDSQL = `
		WITH moved AS (
			DELETE FROM outbox_events WHERE ctid = ANY($1::tid[])
			` + moveToHistorySQL

// moveToHistorySQL is the rest of both marks: the deleted rows go to outbox_published.
const moveToHistorySQL = `RETURNING id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent
		)
		INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent)
		SELECT id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent FROM moved`

// Execer is a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// MarkPublished moves the events ids, which the broker acknowledged, to
// outbox_published (MarkByIDSQL). A row that is not pending (failed, or moved already
// by an earlier publish) stays as it is. It returns how many events it moved.
func MarkPublished(ctx context.Context, q Execer, ids []uuid.UUID) (int64, error) {
	tag, err := q.Exec(ctx, MarkByIDSQL, ids)
	if err != nil {
		return 0, fmt.Errorf("mark outbox events published: %w", err)
	}
	return tag.RowsAffected(), nil
}

// PendingStats counts the pending events and returns the age of the oldest one (zero
// when none). Both come from the partial index on pending rows (an index-only scan: the
// index carries enqueued_at), and the age from the database's clock alone: now() -
// enqueued_at, never created_at, which is the API host's clock
// (migrations/payments/00008_outbox_enqueued_at.sql).
func PendingStats(ctx context.Context, pool *pgxpool.Pool) (count int64, oldestAge time.Duration, err error) {
	var ageSeconds float64
	err = pool.QueryRow(ctx, `
		SELECT count(*), coalesce(extract(epoch FROM now() - min(enqueued_at)), 0)
		FROM outbox_events WHERE status = 'pending'`).Scan(&count, &ageSeconds)
	if err != nil {
		return 0, 0, fmt.Errorf("count pending outbox events: %w", err)
	}
	return count, time.Duration(ageSeconds * float64(time.Second)), nil
}
