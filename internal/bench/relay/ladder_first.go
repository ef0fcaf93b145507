package relay

// The first design of our relay, kept as the top rung of the SQL ladder: what it cost is
// the reason for the current one (docs/adr/0002).

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// firstDesignTableSQL is outbox_events as migrations 00002 to 00008 left it (plus one
// unused column, below): the lease in two columns, published rows kept in place, half of
// each page left free for the lease's HOT updates.
const firstDesignTableSQL = `
	CREATE TABLE outbox_events (
		id               uuid        PRIMARY KEY,
		seq              bigint      GENERATED ALWAYS AS IDENTITY,
		event_type       text        NOT NULL,
		aggregate_id     text        NOT NULL,
		payload          jsonb       NOT NULL,
		status           text        NOT NULL DEFAULT 'pending',
		attempts         integer     NOT NULL DEFAULT 0,
		rejections       integer     NOT NULL DEFAULT 0,
		last_error       text,
		created_at       timestamptz NOT NULL DEFAULT now(),
		published_at     timestamptz,
		next_attempt_at  timestamptz NOT NULL DEFAULT now(),
		lease_token      uuid,
		lease_expires_at timestamptz,
		traceparent      text,
		enqueued_at      timestamptz NOT NULL DEFAULT now(),
		-- Not in the first design: here only so that the backlog fill shared with ours
		-- (benchenv.FillBacklog) can write its rows. Its claim never reads it.
		may_have_predecessor boolean NOT NULL DEFAULT true
	) WITH (fillfactor = 50);
	CREATE INDEX outbox_events_pending_idx ON outbox_events (next_attempt_at, seq) INCLUDE (enqueued_at)
		WHERE status = 'pending';
	CREATE INDEX outbox_events_aggregate_idx ON outbox_events (aggregate_id, seq);
	CREATE INDEX outbox_events_published_at_idx ON outbox_events USING brin (published_at)
		WITH (autosummarize = on) WHERE status = 'published'`

// firstDesignBatch is the first design's batch without the produce: the claim writes a
// lease, the mark updates the row in place fenced by the lease token, each in a
// transaction of its own that does not wait for the flush.
func firstDesignBatch(ctx context.Context, pool *pgxpool.Pool, n int) (int, error) {
	token := uuid.New()
	noFlushWait := pgx.TxOptions{BeginQuery: "BEGIN; SET LOCAL synchronous_commit = off"}
	var ids []uuid.UUID
	err := pgx.BeginTxFunc(ctx, pool, noFlushWait, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `
			UPDATE outbox_events
			SET lease_token = $1, lease_expires_at = now() + interval '30 seconds'
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
				LIMIT $2
				FOR UPDATE SKIP LOCKED)
			RETURNING ctid, id, seq, event_type, aggregate_id, payload, created_at, attempts, rejections, coalesce(traceparent, '')`,
			token, n)
		got, err := pgx.CollectRows(rows, scanClaimedRow)
		for _, row := range got {
			ids = append(ids, row.id)
		}
		return err
	})
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	err = pgx.BeginTxFunc(ctx, pool, noFlushWait, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
			UPDATE outbox_events
			SET status = 'published', published_at = now(), last_error = NULL,
			    lease_token = NULL, lease_expires_at = NULL
			WHERE id = ANY($2) AND lease_token = $1`, token, ids)
		return err
	})
	return len(ids), err
}
