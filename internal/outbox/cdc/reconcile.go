package cdc

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The reconcile pass. The slot is confirmed past an event only once its mark has run,
// but a mark can finish without moving the row: the row was not visible yet when Kafka
// acknowledged the event (store.markPublished waits QueryTimeout for it, and under
// synchronous replication a commit can stay invisible for longer). The row then shows
// up pending behind the confirmed position, where the stream will never bring it again,
// and would stay pending for good although Kafka has the event.
//
// So every ReconcileInterval the relay notes which rows are pending (the oldest
// maxReconciled, leaving out replays, which the relay reads on its own) together with
// the server's WAL position at that moment. Each of those rows committed before that
// position. Once the slot's confirmed position has passed it, every one of them has been
// streamed and published, and its mark has run (or it was dead-lettered), so one still
// pending was missed: it goes to the publisher again, ahead of the stream's next batch,
// as a replay does. It may be in Kafka already: a duplicate, which consumers drop by
// X-Event-Id; the rule is at least once, never a row pending for good.

// maxReconciled bounds the rows one look notes: the oldest pending are the ones a
// missed mark leaves behind, and a long backlog needs no list of its own.
const maxReconciled = 10_000

// reconcileWatch is one noted look: the pending rows and the WAL position after them.
type reconcileWatch struct {
	ids []uuid.UUID
	wal string // pg_lsn, as text
}

// reconcile returns the events the relay must publish again, if any, and notes the next
// look when the previous one is settled. watch is the session's noted look, nil at
// first.
func (r *Relay) reconcile(ctx context.Context, watch *reconcileWatch) ([]outboxEvent, *reconcileWatch, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	var missed []outboxEvent
	if watch != nil {
		passed, err := r.store.confirmedPast(ctx, r.cfg.Slot, watch.wal)
		if err != nil || !passed {
			return nil, watch, err
		}
		if missed, err = r.store.stillPending(ctx, watch.ids); err != nil {
			return nil, watch, err
		}
		if len(missed) > 0 {
			r.logger.Warn("rows left pending behind the slot's confirmed position; publishing them again",
				slog.Int("events", len(missed)), slog.String("first_event_id", missed[0].ID.String()))
			r.metrics.reconciled.Add(float64(len(missed)))
		}
	}
	next, err := r.store.watchPending(ctx)
	if err != nil {
		return missed, nil, err
	}
	return missed, next, nil
}

// watchPending notes the oldest pending rows that are not replays, and the WAL position
// after their commits.
func (s store) watchPending(ctx context.Context) (*reconcileWatch, error) {
	var w reconcileWatch
	err := s.pool.QueryRow(ctx, `
		SELECT coalesce(array_agg(id), '{}'), pg_current_wal_lsn()::text FROM (
			SELECT e.id FROM outbox_events e
			WHERE e.status = 'pending'
			  AND NOT EXISTS (SELECT 1 FROM outbox_dlq d WHERE d.event_id = e.id)
			ORDER BY e.seq LIMIT $1) p`, maxReconciled).Scan(&w.ids, &w.wal)
	if err != nil {
		return nil, fmt.Errorf("note pending rows to reconcile: %w", err)
	}
	return &w, nil
}

// confirmedPast reports whether the slot's confirmed position is at or past wal.
func (s store) confirmedPast(ctx context.Context, slot, wal string) (bool, error) {
	var passed bool
	err := s.pool.QueryRow(ctx, `
		SELECT coalesce((SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1), false)`,
		slot, wal).Scan(&passed)
	if err != nil {
		return false, fmt.Errorf("read confirmed position of slot %s: %w", slot, err)
	}
	return passed, nil
}

// stillPending returns the events among ids that are still pending and not replays, in
// seq order.
func (s store) stillPending(ctx context.Context, ids []uuid.UUID) ([]outboxEvent, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, _ := s.pool.Query(ctx, `
		SELECT e.id, e.seq, e.event_type, e.aggregate_id, e.payload, e.created_at, coalesce(e.traceparent, '')
		FROM outbox_events e
		WHERE e.id = ANY($1) AND e.status = 'pending'
		  AND NOT EXISTS (SELECT 1 FROM outbox_dlq d WHERE d.event_id = e.id)
		ORDER BY e.seq`, ids)
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("read rows to reconcile: %w", err)
	}
	return events, nil
}
