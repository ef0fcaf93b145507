package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
	"github.com/dscourse/payments-outbox/internal/pguuid"
)

// The CDC relay's SQL on the ordinary pool, in one place. The stream tells the relay
// what to publish; these statements keep the outbox rows telling the same story as in
// polling mode (status, attempts, last_error, the move to outbox_published, the DLQ), so that GET
// /payments/{id}, the cleaner and the operators' queries work unchanged. Each runs on
// its own (autocommit), never while the relay waits on Kafka.

type store struct {
	pool *pgxpool.Pool
}

// MarkPublishedSQL moves the events $1 (their ids), which Kafka acknowledged, to
// outbox_published: the statement this relay marks with. The polling relay marks the
// rows its transaction holds by TID instead (poll.MarkClaimedSQL); cmd/bench prices the
// two against each other.
const MarkPublishedSQL = delivery.MarkByIDSQL

// markPublished moves acknowledged events to outbox_published, as the polling relay
// does. A row already moved (a republish after a restart) or failed is left alone.
//
// The stream can carry a transaction a moment before other sessions see it: the server
// sends WAL once the commit record is flushed, and the committing backend leaves the
// list of running transactions only after that. A move in that moment finds no row,
// and the event would stay pending for good although Kafka has it (the
// long-transaction chaos scenario with RELAY_MODE=cdc hits that moment for a few
// events in a thousand on a busy machine).
// So the events the move missed are moved again every markRetryInterval until ctx
// ends; those still unmarked then are returned (an event published again after the
// cleaner deleted its history is one of them).
//
// A missed row is nearly always that moment, over after a retry or two. Only events
// still missed after quickMarkRetries are looked up (notMarked) to leave out those
// moved already or failed, which no retry would move: the lookup reads the whole
// history table, which has no index on id (migration 00009), and beside a history of
// a million rows one lookup took a second, during which this marker, and the
// publishers waiting on it, stood still (docs/bench.md, "How both relays scale").
func (s store) markPublished(ctx context.Context, ids []uuid.UUID) (unmarked []uuid.UUID, err error) {
	missed, err := s.move(ctx, ids)
	for try := 1; err == nil && len(missed) > 0; try++ {
		if try == quickMarkRetries+1 {
			if missed, err = s.notMarked(ctx, missed); err != nil {
				if ctx.Err() != nil {
					return missed, nil
				}
				break
			}
			if len(missed) == 0 {
				return nil, nil
			}
		}
		select {
		case <-ctx.Done():
			return missed, nil
		case <-time.After(markRetryInterval):
		}
		left, err := s.move(ctx, missed)
		if err != nil {
			if ctx.Err() != nil {
				return missed, nil // ctx ended during a retry: the first move did its part
			}
			return nil, err
		}
		missed = left
	}
	return nil, err
}

// markRetryInterval is the wait before an event the move did not find is moved again,
// and quickMarkRetries how many such retries come before the lookup of the events
// still missed: the moment a commit takes to become visible is far shorter.
const (
	markRetryInterval = 10 * time.Millisecond
	quickMarkRetries  = 5
)

// move moves the pending rows of ids to the history and returns the ids it did not
// find pending: not visible yet, moved already, or failed.
func (s store) move(ctx context.Context, ids []uuid.UUID) (missed []uuid.UUID, err error) {
	rows, _ := s.pool.Query(ctx, MarkPublishedSQL+` RETURNING id`, pguuid.Arrays(ids))
	moved := make(map[uuid.UUID]bool, len(ids))
	var id uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{(*[16]byte)(&id)}, func() error {
		moved[id] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("mark outbox events published: %w", err)
	}
	for _, id := range ids {
		if !moved[id] {
			missed = append(missed, id)
		}
	}
	return missed, nil
}

// notMarked returns the ids that are neither in outbox_published nor failed: still
// pending, or not visible to this session yet.
func (s store) notMarked(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error) {
	rows, _ := s.pool.Query(ctx, `
		SELECT u.id FROM unnest($1::uuid[]) AS u(id)
		WHERE NOT EXISTS (SELECT 1 FROM outbox_published p WHERE p.id = u.id)
		  AND NOT EXISTS (SELECT 1 FROM outbox_events e WHERE e.id = u.id AND e.status <> 'pending')`, ids)
	left, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("look up unmarked outbox events: %w", err)
	}
	return left, nil
}

// recordAttempt stores one failed publish of each event on its row, as the polling
// relay does: attempts and last_error always, rejections only when the broker refused
// the record. It returns each event's rejections so far, which survive a restart.
func (s store) recordAttempt(ctx context.Context, ids []uuid.UUID, rejected bool, lastError string) (map[uuid.UUID]int, error) {
	rows, _ := s.pool.Query(ctx, `
		UPDATE outbox_events
		SET attempts = attempts + 1,
		    rejections = rejections + CASE WHEN $2 THEN 1 ELSE 0 END,
		    last_error = $3
		WHERE id = ANY($1)
		RETURNING id, rejections`, ids, rejected, lastError)
	out := map[uuid.UUID]int{}
	var id uuid.UUID
	var rejections int
	_, err := pgx.ForEachRow(rows, []any{&id, &rejections}, func() error {
		out[id] = rejections
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record failed publish: %w", err)
	}
	return out, nil
}

// recordHeldBack sets last_error on the rows of events the relay holds back unsent
// (parked, parking.go), and counts no attempt: nothing was sent. The polling relay does
// the same for the events its breaker holds back.
func (s store) recordHeldBack(ctx context.Context, ids []uuid.UUID, lastError string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE outbox_events SET last_error = $2 WHERE id = ANY($1) AND status = 'pending'`,
		ids, lastError); err != nil {
		return fmt.Errorf("record held-back events: %w", err)
	}
	return nil
}

// deadLetter moves an event to the DLQ in one transaction, as the polling relay does:
// the row becomes 'failed' and a copy goes to outbox_dlq, where an operator replays it.
// reason becomes its last_error. It returns the dead letter for the alert, or nil when
// the row was already failed or published (nothing moved, nothing to alert).
//
// A row the move does not find at all is not taken for either: the stream can carry a
// commit before this session sees it (markPublished says why), and an event dropped
// then would be neither in Kafka nor in the DLQ while the slot is confirmed past it. So
// the move is tried again every markRetryInterval, as the mark does, and fails once
// ctx ends with the row still not found: the stream stops before that event, and the
// next session streams it again.
func (s store) deadLetter(ctx context.Context, id uuid.UUID, reason string) (*outbox.DeadLetter, error) {
	for try := 1; ; try++ {
		dead, found, err := s.deadLetterOnce(ctx, id, reason, try > quickMarkRetries)
		if err != nil || found {
			return dead, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dead-letter outbox event %s: its row is not visible: %w", id, ctx.Err())
		case <-time.After(markRetryInterval):
		}
	}
}

// deadLetterOnce is one try of deadLetter; found is false when the event's row is
// nowhere to be seen, in the outbox or, when inHistory is set, its history. As the mark
// does (markPublished), the history, which it reads whole, is asked only once the
// moment a commit takes to show is past.
//
// It looks for the row before it moves it. A row that a statement saw stays visible to
// every later statement, so an UPDATE that then touches nothing means the row is no
// longer pending. In the other order, a commit that becomes visible between the two
// statements would make an UPDATE of nothing look like "already moved".
func (s store) deadLetterOnce(ctx context.Context, id uuid.UUID, reason string, inHistory bool) (dead *outbox.DeadLetter, found bool, err error) {
	lookup := `SELECT EXISTS (SELECT 1 FROM outbox_events WHERE id = $1)`
	if inHistory {
		lookup += ` OR EXISTS (SELECT 1 FROM outbox_published WHERE id = $1)`
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, lookup, id).Scan(&found); err != nil || !found {
			return err
		}
		tag, err := tx.Exec(ctx, `
			UPDATE outbox_events SET status = 'failed', last_error = $2
			WHERE id = $1 AND status = 'pending'`, id, reason)
		if err != nil || tag.RowsAffected() == 0 {
			return err // already failed or published: nothing to move
		}
		var d outbox.DeadLetter
		err = tx.QueryRow(ctx, `
			INSERT INTO outbox_dlq (event_id, event_type, aggregate_id, payload, attempts, last_error)
			SELECT id, event_type, aggregate_id, payload, attempts, last_error
			FROM outbox_events WHERE id = $1
			ON CONFLICT (event_id) DO UPDATE
			SET attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
			    failed_at = now(), replayed_at = NULL
			RETURNING event_id, event_type, aggregate_id, attempts, last_error, failed_at`, id).
			Scan(&d.EventID, &d.EventType, &d.AggregateID, &d.Attempts, &d.LastError, &d.FailedAt)
		dead = &d
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("dead-letter outbox event %s: %w", id, err)
	}
	return dead, found, nil
}

// blockedAggregates returns which of the events' aggregates are blocked: an earlier
// event of the aggregate (a lower seq) has a DLQ row and is not published, because it is
// failed, or replayed and not yet published (the stream does not carry a replay: the
// relay reads replays at its next look, and an event of the aggregate streamed
// meanwhile must not overtake it). published are events Kafka acknowledged whose rows
// are not marked yet: they block nothing. A blocked event goes to the DLQ behind its
// predecessor (polling mode holds it in the table; the stream cannot wait), to be
// replayed in order. The events are of distinct aggregates (one wave, publishWave).
//
// The lookup reads the (aggregate_id, seq) index once per event, so it first asks
// whether the DLQ holds any entry whose event is still in the outbox, which it nearly
// never does: a failed row always has one (both relays write the two in one
// transaction, and a replay keeps the entry until the mark moves the row). Without
// that question first, the lookup of a batch of a few hundred events costs 10-30 ms on
// a loaded machine, a third of the publisher's time in a drain, and it runs before
// every batch.
func (s store) blockedAggregates(ctx context.Context, events []outboxEvent, published []uuid.UUID) (map[string]bool, error) {
	var dlqHolds bool
	err := s.pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM outbox_dlq d
		               WHERE d.replayed_at IS NULL
		                  OR EXISTS (SELECT 1 FROM outbox_events e WHERE e.id = d.event_id))`).Scan(&dlqHolds)
	if err != nil {
		return nil, fmt.Errorf("look for dead letters: %w", err)
	}
	if !dlqHolds {
		return nil, nil
	}
	aggregates, seqs := make([]string, len(events)), make([]int64, len(events))
	for i, e := range events {
		aggregates[i], seqs[i] = e.AggregateID, e.Seq
	}
	rows, _ := s.pool.Query(ctx, `
		SELECT DISTINCT u.aggregate_id FROM unnest($1::text[], $2::bigint[]) AS u(aggregate_id, seq)
		WHERE EXISTS (
			SELECT 1 FROM outbox_events e
			WHERE e.aggregate_id = u.aggregate_id AND e.seq < u.seq
			  AND e.id <> ALL(coalesce($3::uuid[], '{}'))
			  AND (e.status = 'failed' OR EXISTS (SELECT 1 FROM outbox_dlq d WHERE d.event_id = e.id)))`,
		aggregates, seqs, published)
	blocked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up dead-lettered aggregates: %w", err)
	}
	out := make(map[string]bool, len(blocked))
	for _, a := range blocked {
		out[a] = true
	}
	return out, nil
}

// pendingRows returns the pending rows in seq order: all of them (catchUp without a
// snapshot) or, when replayedOnly, those an operator sent back from the DLQ (an
// UPDATE, which the stream does not carry). tx may carry an exported snapshot.
func pendingRows(ctx context.Context, q pgx.Tx, replayedOnly bool) ([]outboxEvent, error) {
	rows, _ := q.Query(ctx, `
		SELECT e.id, e.seq, e.event_type, e.aggregate_id, e.payload, e.created_at, coalesce(e.traceparent, '')
		FROM outbox_events e
		WHERE e.status = 'pending'
		  AND (NOT $1 OR EXISTS (SELECT 1 FROM outbox_dlq d WHERE d.event_id = e.id AND d.replayed_at IS NOT NULL))
		ORDER BY e.seq`, replayedOnly)
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("read pending outbox events: %w", err)
	}
	return events, nil
}

// scanEvent reads a row of id, seq, event_type, aggregate_id, payload, created_at and
// traceparent (never NULL).
func scanEvent(row pgx.CollectableRow) (outboxEvent, error) {
	var e outboxEvent
	err := row.Scan(&e.ID, &e.Seq, &e.Type, &e.AggregateID, &e.Payload, &e.CreatedAt, &e.Traceparent)
	return e, err
}

// pendingAt reads the pending rows as of snapshot (or now, when snapshot is empty).
func (s store) pendingAt(ctx context.Context, snapshot string, replayedOnly bool) ([]outboxEvent, error) {
	var events []outboxEvent
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if snapshot != "" {
			// The name comes from the server (CREATE_REPLICATION_SLOT), never from a user.
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET TRANSACTION SNAPSHOT '%s'", snapshot)); err != nil {
				return fmt.Errorf("use the slot's snapshot: %w", err)
			}
		}
		var err error
		events, err = pendingRows(ctx, tx, replayedOnly)
		return err
	})
	return events, err
}

// caughtUp reports whether the slot's start-up catch-up is over (migration 00007).
func (s store) caughtUp(ctx context.Context, slot string) (bool, error) {
	var done bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_cdc_slots WHERE slot_name = $1)`, slot).Scan(&done)
	if err != nil {
		return false, fmt.Errorf("read catch-up state of slot %s: %w", slot, err)
	}
	return done, nil
}

func (s store) markCaughtUp(ctx context.Context, slot string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO outbox_cdc_slots (slot_name) VALUES ($1)
		ON CONFLICT (slot_name) DO UPDATE SET caught_up_at = now()`, slot)
	if err != nil {
		return fmt.Errorf("record catch-up of slot %s: %w", slot, err)
	}
	return nil
}

// forgetCatchUp clears the catch-up record of a slot about to be created, so that a
// relay that stops before the new slot's catch-up ends leaves it to be done again.
func (s store) forgetCatchUp(ctx context.Context, slot string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM outbox_cdc_slots WHERE slot_name = $1`, slot)
	if err != nil {
		return fmt.Errorf("clear catch-up state of slot %s: %w", slot, err)
	}
	return nil
}

// walRetained is how much WAL the slot keeps the server from recycling, from its
// restart_lsn to the current WAL position; -1 when the slot does not exist.
func (s store) walRetained(ctx context.Context, slot string) (int64, error) {
	var retained int64
	err := s.pool.QueryRow(ctx, `
		SELECT coalesce((SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint
		                 FROM pg_replication_slots WHERE slot_name = $1), -1)`,
		slot).Scan(&retained)
	if err != nil {
		return 0, fmt.Errorf("read the WAL slot %s retains: %w", slot, err)
	}
	return retained, nil
}
