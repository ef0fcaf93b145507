package verify

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// What the harness reads of a relay's outbox rows from outside. The outbox layout is a
// MAY of docs/contract.md, and two layouts are common: a relay that leases rows in
// columns (lease_expires_at) and marks them published in place, and ours, which holds
// its rows as row locks of the batch's transaction and moves each published event to
// outbox_published (docs/adr/0002). These functions read both.

// FreePendingIDsSQL selects the pending outbox rows that no batch's transaction holds:
// those a FOR KEY SHARE SKIP LOCKED of the harness's own can lock. Run it in a
// transaction that ends at once: its weak locks last that long, during which a relay's
// claim skips those rows as it would another relay's.
const FreePendingIDsSQL = `SELECT id FROM outbox_events WHERE status = 'pending' FOR KEY SHARE SKIP LOCKED`

// HeldOutboxRows counts the pending outbox rows a relay holds right now: under a live
// lease (lease_expires_at), or locked by a batch's transaction (all pending rows but
// the free ones, FreePendingIDsSQL).
func HeldOutboxRows(ctx context.Context, conn *pgx.Conn) (int, error) {
	leaseColumn, err := HasColumn(ctx, conn, "outbox_events", "lease_expires_at")
	if err != nil {
		return 0, err
	}
	if leaseColumn {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'pending' AND lease_expires_at > now()`).Scan(&n)
		return n, err
	}
	var held int
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM outbox_events WHERE status = 'pending')
			     - (SELECT count(*) FROM (`+FreePendingIDsSQL+`) AS free)`).
			Scan(&held)
	})
	if err != nil {
		return 0, fmt.Errorf("count held outbox rows: %w", err)
	}
	return held, nil
}

// PublishedEventsTable returns the table and column that say when an event was
// published: outbox_published.published_at when the outbox moves published events
// there, outbox_events.published_at otherwise.
func PublishedEventsTable(ctx context.Context, conn *pgx.Conn) (string, error) {
	moved, err := HasColumn(ctx, conn, "outbox_published", "published_at")
	if err != nil {
		return "", err
	}
	if moved {
		return "outbox_published", nil
	}
	return "outbox_events", nil
}

// AllOutboxEvents returns a FROM item that lists every event the outbox holds, with
// id, aggregate_id, event_type, payload, status and rejections: outbox_events alone, or
// with outbox_published (status 'published') when published events move there.
func AllOutboxEvents(ctx context.Context, conn *pgx.Conn) (string, error) {
	table, err := PublishedEventsTable(ctx, conn)
	if err != nil {
		return "", err
	}
	if table == "outbox_events" {
		return "outbox_events", nil
	}
	return `(SELECT id, aggregate_id, event_type, payload, status, rejections FROM outbox_events
		UNION ALL
		SELECT id, aggregate_id, event_type, payload, 'published', rejections FROM ` + table + `)`, nil
}
