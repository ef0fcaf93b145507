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

// The SQL of the write side's operator tools: the cleaner's delete and the DLQ's list
// and replay. The relays' own SQL is in their packages (poll/batch.go and poll/failure.go, cdc/store.go).

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

// deletePublishedSQL deletes at most $2 rows published more than $1 seconds ago; see
// deletePublished. Its plan must read the partial index on published_at (plan_test.go).
const deletePublishedSQL = `
		DELETE FROM outbox_published
		WHERE ctid IN (
			SELECT ctid FROM outbox_published
			WHERE published_at < now() - make_interval(secs => $1)
			LIMIT $2)`

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
