package verify

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema says which of the tables and columns that docs/contract.md names the verifier
// found. None is looked up "when present" in silence: a MUST that is missing fails the
// run (the "consumer tables" contract row), and a MAY that is missing turns its check
// off, which the verdict shows as a row marked off.
type Schema struct {
	// OutboxEvents (MAY): outbox_events with a status column; without it the drain is
	// measured from the topic and dead letters from outbox_dlq alone.
	OutboxEvents bool `json:"outbox_events"`
	// OutboxDLQ (MAY): outbox_dlq; without it dead letters are counted from
	// outbox_events alone, and without both the dead-letter check is off.
	OutboxDLQ bool `json:"outbox_dlq"`
	// DLQReplayedAt (MAY): outbox_dlq.replayed_at; a row with it set is a dead letter
	// an operator sent back, kept as history, and no longer counts.
	DLQReplayedAt bool `json:"outbox_dlq_replayed_at"`
	// PaymentLifecycle (MAY): payments.status, payments.version and
	// payments.refunded_amount, the payment's state, transition count and refunds
	// (docs/adr/0006). Without them the verifier cannot know which
	// transitions were committed: the order of the topic is still checked, "every
	// committed transition has its event" is off.
	PaymentLifecycle bool `json:"payments_lifecycle"`
	// ConsumerDatabase is whether a consumer database was given at all (optional for
	// a black-box run; without it the consumer's checks are off).
	ConsumerDatabase bool `json:"consumer_database"`
	// Decisions (MUST with a consumer database): decisions(payment_id).
	Decisions bool `json:"decisions"`
	// DecisionEventIDs (MUST with a consumer database): decisions.event_id, the event
	// the decision was made from.
	DecisionEventIDs bool `json:"decisions_event_id"`
	// UserTotals (MUST with a consumer database): user_totals, the running totals
	// that a redelivery without dedup would change.
	UserTotals bool `json:"user_totals"`
	// ConsumerOrder (MAY): processed_events.sequence and processed_order, which event of
	// its payment each dedup row is and in which order the consumer took it; without
	// them the consumer's applied order is not checked.
	ConsumerOrder bool `json:"consumer_order"`
	// OrderViolations (MAY): the consumer's own order_violations table, shown beside the
	// verifier's count.
	OrderViolations bool `json:"order_violations"`
}

// MissingConsumerTables names the consumer tables and columns the contract requires
// but the consumer database lacks; empty without a consumer database.
func (s Schema) MissingConsumerTables() []string {
	if !s.ConsumerDatabase {
		return nil
	}
	var missing []string
	if !s.Decisions {
		missing = append(missing, "decisions(payment_id)")
	}
	if !s.DecisionEventIDs {
		missing = append(missing, "decisions.event_id")
	}
	if !s.UserTotals {
		missing = append(missing, "user_totals")
	}
	return missing
}

// rowQuerier is a pool or a connection.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schema looks up every table and column of the contract.
func (v *Verifier) schema(ctx context.Context) (Schema, error) {
	s := Schema{ConsumerDatabase: v.consumer != nil}
	type lookup struct {
		found         *bool
		db            *pgxpool.Pool
		table, column string
	}
	lookups := []lookup{
		{&s.OutboxEvents, v.payments, "outbox_events", "status"},
		{&s.OutboxDLQ, v.payments, "outbox_dlq", ""},
		{&s.DLQReplayedAt, v.payments, "outbox_dlq", "replayed_at"},
		{&s.PaymentLifecycle, v.payments, "payments", "version"},
	}
	if v.consumer != nil {
		lookups = append(lookups,
			lookup{&s.Decisions, v.consumer, "decisions", "payment_id"},
			lookup{&s.DecisionEventIDs, v.consumer, "decisions", "event_id"},
			lookup{&s.UserTotals, v.consumer, "user_totals", ""},
			lookup{&s.ConsumerOrder, v.consumer, "processed_events", "processed_order"},
			lookup{&s.OrderViolations, v.consumer, "order_violations", ""},
		)
	}
	for _, l := range lookups {
		var err error
		if *l.found, err = HasColumn(ctx, l.db, l.table, l.column); err != nil {
			return s, err
		}
	}
	// version alone does not say the state nor the refunds: all three columns, or none.
	for _, column := range []string{"status", "refunded_amount"} {
		if !s.PaymentLifecycle {
			break
		}
		var err error
		if s.PaymentLifecycle, err = HasColumn(ctx, v.payments, "payments", column); err != nil {
			return s, err
		}
	}
	if s.ConsumerOrder {
		var err error
		if s.ConsumerOrder, err = HasColumn(ctx, v.consumer, "processed_events", "sequence"); err != nil {
			return s, err
		}
	}
	return s, nil
}

// HasColumn reports whether db has table (in its search path) and, unless column is
// empty, a column of that name in it.
func HasColumn(ctx context.Context, db rowQuerier, table, column string) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, `
		SELECT to_regclass($1) IS NOT NULL AND ($2 = '' OR EXISTS (
			SELECT 1 FROM pg_attribute
			WHERE attrelid = to_regclass($1) AND attname = $2 AND attnum > 0 AND NOT attisdropped))`,
		table, column).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up %s %s: %w", table, column, err)
	}
	return ok, nil
}
