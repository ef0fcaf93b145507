// Package outbox is the write side of the transactional outbox: start with Insert,
// which writes an event in the caller's transaction, so that the event commits or rolls
// back with the business change it describes. That is the part of the pattern a service
// copies.
//
// The rest of the package is what an operator needs around the table: DLQ lists and
// replays the dead letters (events the broker rejected too often), and Cleaner deletes
// published events after their retention.
//
// Publishing is not here. A relay reads the committed events and sends them to Kafka:
// package poll polls the table (the default), package cdc follows PostgreSQL's
// replication stream; what both share lives in internal/delivery.
//
// The package knows nothing about payments. It stores opaque JSON payloads under an
// aggregate id, which becomes the Kafka record key.
package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/tracing"
)

// A Message is one event to publish.
type Message struct {
	// ID identifies the event forever; it is sent as the X-Event-Id header and is what
	// consumers deduplicate on. Use a new UUID per event.
	ID uuid.UUID
	// Type names the event, e.g. "PaymentCreated"; sent as the X-Event-Type header.
	Type string
	// AggregateID is the id of the entity the event is about. It is the Kafka record
	// key, so all events of one aggregate go to one partition, in order.
	AggregateID string
	// Payload is the JSON body of the record.
	Payload []byte
	// OccurredAt is when the event happened; sent as the X-Event-Occurred-At header.
	OccurredAt time.Time
}

// Insert adds msg to the outbox inside the caller's transaction tx. It never opens a
// transaction of its own: the event must commit or roll back together with the
// business change it describes, which is the whole point of the pattern. It takes a
// pgx.Tx, not an interface a pool also satisfies, so that a call outside a transaction
// does not compile.
//
// next_attempt_at is left to its default, the database's now(): the claim compares it
// with the database's clock, and msg.OccurredAt is the API host's, so an API host
// running ahead would hold its events back by its skew.
//
// The traceparent of the span in ctx, if any, is stored with the row, so that the
// relay's publish continues the writer's trace (package poll, trace.go).
//
// The same statement records whether an earlier event of the aggregate is still in the
// outbox (may_have_predecessor), so that the relay's claim checks the order rule only
// for the events that can be behind another (migrations/payments/00010). That answer
// holds only if writers of one aggregate never run concurrently: the caller serialises
// them, as the payment API does with the payment's row lock. Per-aggregate order needs
// that anyway, since two concurrent writers could commit in the other order than their
// rows' seq.
func Insert(ctx context.Context, tx pgx.Tx, msg Message) error {
	if _, err := tx.Exec(ctx, insertSQL, insertArgs(ctx, msg)...); err != nil {
		return fmt.Errorf("insert outbox event %s: %w", msg.ID, err)
	}
	return nil
}

// QueueInsert is Insert for a caller that sends its transaction as one batch: it
// queues msg's insert on b, whose transaction the caller began with b.BeginTx, so
// that the event travels to the database with the business change in one round trip
// and still commits or rolls back with it. (A batch sent without BeginTx is one
// implicit transaction, which is atomic too, but then the caller cannot decide to roll
// back after reading the results.) The insert's result is the next one in b's results,
// in the order queued: read it, or let the results' Close return its error.
func QueueInsert(ctx context.Context, b *pgx.Batch, msg Message) {
	b.Queue(insertSQL, insertArgs(ctx, msg)...)
}

// insertSQL is the statement of Insert and QueueInsert.
const insertSQL = `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload, created_at, traceparent, may_have_predecessor)
		VALUES ($1, $2, $3, $4, $5, $6, EXISTS (SELECT 1 FROM outbox_events WHERE aggregate_id = $3))`

// insertArgs are insertSQL's arguments for msg, with the traceparent of ctx's span.
func insertArgs(ctx context.Context, msg Message) []any {
	var traceparent *string // NULL when ctx carries no trace
	if tp := tracing.Traceparent(ctx); tp != "" {
		traceparent = &tp
	}
	// The id as the [16]byte it is, which pgx sends in binary; a uuid.UUID would go
	// through its text form (internal/pguuid).
	return []any{[16]byte(msg.ID), msg.Type, msg.AggregateID, msg.Payload, msg.OccurredAt, traceparent}
}
