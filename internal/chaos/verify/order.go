package verify

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/event"
)

// The lifecycle checks (docs/adr/0006): a payment has several events, one per committed
// transition, each with its sequence number, and they must reach the topic, and the
// consumer, in that sequence. The relay's claim keeps that order only if it never
// publishes an event while an earlier one of its aggregate is unfinished; a claim without
// that check publishes a capture held back by no fault before its creation held back by
// one, and the topic shows it.

// A CommittedLifecycle is what the payments table says of a payment's transitions.
type CommittedLifecycle struct {
	Status string
	// Version is the number of committed transitions, the creation included: the
	// events 1..Version must be in the topic, and no other.
	Version int
}

// ExpectedType is the event type of transition sequence of a payment that ended in
// status: 1 is the creation, 2 the capture or the cancellation, the rest refunds.
func (l CommittedLifecycle) ExpectedType(sequence int) string {
	switch {
	case sequence == event.CreatedSequence:
		return event.TypePaymentCreated
	case sequence == 2 && l.Status == "cancelled":
		return event.TypePaymentCancelled
	case sequence == 2:
		return event.TypePaymentCaptured
	default:
		return event.TypePaymentRefunded
	}
}

// committedLifecycles reads every payment's state and version.
func (v *Verifier) committedLifecycles(ctx context.Context) (map[string]CommittedLifecycle, error) {
	rows, err := v.payments.Query(ctx, `SELECT id::text, status::text, version::int FROM payments`)
	if err != nil {
		return nil, fmt.Errorf("read committed transitions: %w", err)
	}
	out := map[string]CommittedLifecycle{}
	var id string
	var l CommittedLifecycle
	_, err = pgx.ForEachRow(rows, []any{&id, &l.Status, &l.Version}, func() error {
		out[id] = l
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read committed transitions: %w", err)
	}
	return out, nil
}

// consumerOrder reads, per payment, the sequences of the events the consumer took, in
// the order it took them (processed_events.processed_order), and the number of rows in
// its own order_violations table, -1 without one.
func (v *Verifier) consumerOrder(ctx context.Context, schema Schema) (map[string][]int, int, error) {
	rows, err := v.consumer.Query(ctx, `
		SELECT payment_id::text, sequence FROM processed_events
		WHERE sequence IS NOT NULL ORDER BY processed_order`)
	if err != nil {
		return nil, 0, fmt.Errorf("read the consumer's applied order: %w", err)
	}
	order := map[string][]int{}
	var id string
	var sequence int
	_, err = pgx.ForEachRow(rows, []any{&id, &sequence}, func() error {
		order[id] = append(order[id], sequence)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the consumer's applied order: %w", err)
	}
	own := -1
	if schema.OrderViolations {
		if err := v.consumer.QueryRow(ctx, `SELECT count(*) FROM order_violations`).Scan(&own); err != nil {
			return nil, 0, fmt.Errorf("count the consumer's order violations: %w", err)
		}
	}
	return order, own, nil
}
