package antifraud

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/pguuid"
)

// The events of one payment must be applied in their sequence (docs/adr/0006): a refund
// applied before its capture, or a cancellation before the creation it cancels, would
// leave the user's totals wrong for good. The relay keeps each payment's order, and the
// record key keeps a payment on one partition, so an event that does not follow the last
// one applied must never arrive. If one does, it is not applied and not retried (it would
// stall its partition): it is kept in order_violations, counted in
// antifraud_order_violations_total and logged at Error level, for someone to look at the
// producer. One exception: an event whose predecessor has not been applied yet
// (OrderMissingPredecessor) may simply have overtaken it, as an event replayed from the
// relay's DLQ is overtaken by its successors; it is parked until the predecessor comes
// (park.go), and counted here only if it is refused then.

// Order violation reasons: the values of order_violations.reason and of the reason label
// of antifraud_order_violations_total.
const (
	// OrderMissingPredecessor: the event's sequence is beyond the next one, so an event
	// in between has not been applied (not delivered yet, or lost). Such an event is
	// parked (park.go), not recorded as a violation.
	OrderMissingPredecessor = "missing_predecessor"
	// OrderOutOfOrder: the sequence is at or below the last one applied, under a new
	// event id: a later event overtook this one, or the producer wrote one transition
	// twice.
	OrderOutOfOrder = "out_of_order"
	// OrderInvalidTransition: the next sequence, but a transition the payment's state
	// does not allow (a refund after a cancellation).
	OrderInvalidTransition = "invalid_transition"
)

// orderReasons is every reason there is, for tests that the label set stays fixed.
var orderReasons = []string{OrderMissingPredecessor, OrderOutOfOrder, OrderInvalidTransition}

// allowedAfter lists, per event type, the type of the last applied event it may follow;
// "" is a payment the consumer has not seen yet.
var allowedAfter = map[string][]string{
	event.TypePaymentCreated:   {""},
	event.TypePaymentCaptured:  {event.TypePaymentCreated},
	event.TypePaymentCancelled: {event.TypePaymentCreated},
	event.TypePaymentRefunded:  {event.TypePaymentCaptured, event.TypePaymentRefunded},
}

// progress is how far the consumer has applied a payment: the progress columns of its
// decision row (migrations/antifraud/00007_progress_in_decisions.sql). The zero value is a
// payment it has not seen: no decision, not even its PaymentCreated applied.
type progress struct {
	sequence int
	lastType string
	eventID  uuid.UUID
}

// orderViolation returns why ev cannot follow p, or "" when it is the payment's next event.
func orderViolation(p progress, ev paymentEvent) string {
	switch next := p.sequence + 1; {
	case ev.sequence > next:
		return OrderMissingPredecessor
	case ev.sequence < next:
		return OrderOutOfOrder
	case !slices.Contains(allowedAfter[ev.typ], p.lastType):
		return OrderInvalidTransition
	}
	return ""
}

// A violation is an event refused by the order check, with what the consumer knew.
type violation struct {
	ev     paymentEvent
	before progress
	reason string
}

// inOrder splits events, in batch order, into those that follow their payment's progress
// (known from the database, then advanced by the batch's own events) and the violations.
// It returns the progress of every payment it advanced. Pure, for table tests.
func inOrder(known map[uuid.UUID]progress, events []paymentEvent) (applied []paymentEvent, violations []violation, advanced map[uuid.UUID]progress) {
	advanced = map[uuid.UUID]progress{}
	for _, ev := range events {
		id := ev.payload.PaymentID
		p, ok := advanced[id]
		if !ok {
			p = known[id]
		}
		if reason := orderViolation(p, ev); reason != "" {
			violations = append(violations, violation{ev: ev, before: p, reason: reason})
			continue
		}
		applied = append(applied, ev)
		advanced[id] = progress{sequence: ev.sequence, lastType: ev.typ, eventID: ev.id}
	}
	return applied, violations, advanced
}

// selectProgress reads and locks the decision rows of the events' payments, where their
// progress is kept, so that a consumer taking over a partition in a rebalance waits for
// the one still at work. The progress is read from the locked row itself: after such a
// wait, PostgreSQL returns the row as the other consumer committed it (a column of
// another table, joined, would be read as it was before the wait).
func selectProgress(ctx context.Context, tx pgx.Tx, events []paymentEvent) (map[uuid.UUID]progress, error) {
	ids := make([]uuid.UUID, len(events))
	for i, ev := range events {
		ids[i] = ev.payload.PaymentID
	}
	rows, err := tx.Query(ctx, `
		SELECT payment_id, coalesce(last_sequence, 1), coalesce(state, $2), coalesce(last_event_id, event_id)
		FROM decisions WHERE payment_id = ANY($1) ORDER BY payment_id FOR UPDATE`,
		pguuid.Arrays(ids), event.TypePaymentCreated)
	if err != nil {
		return nil, fmt.Errorf("select payment progress: %w", err)
	}
	known := map[uuid.UUID]progress{}
	var id uuid.UUID
	var p progress
	_, err = pgx.ForEachRow(rows, []any{(*[16]byte)(&id), &p.sequence, &p.lastType, (*[16]byte)(&p.eventID)}, func() error {
		known[id] = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("select payment progress: %w", err)
	}
	return known, nil
}

// beyondCreation returns the progress of the payments in advanced that moved past their
// creation: the only ones saveProgress has to write, as a decision row is inserted with
// the progress of its creation (the columns' defaults).
func beyondCreation(advanced map[uuid.UUID]progress) map[uuid.UUID]progress {
	out := map[uuid.UUID]progress{}
	for id, p := range advanced {
		if p.sequence > 1 {
			out[id] = p
		}
	}
	return out
}

// saveProgress writes the progress of each payment in advanced into its decision row,
// which exists: it was locked by selectProgress, or inserted by this transaction.
func saveProgress(ctx context.Context, tx pgx.Tx, advanced map[uuid.UUID]progress) error {
	var ids, events []uuid.UUID
	var sequences []int32
	var states []string
	for id, p := range advanced {
		ids, events = append(ids, id), append(events, p.eventID)
		sequences, states = append(sequences, int32(p.sequence)), append(states, p.lastType)
	}
	_, err := tx.Exec(ctx, `
		UPDATE decisions d
		SET last_sequence = u.last_sequence, state = u.state, last_event_id = u.last_event_id
		FROM unnest($1::uuid[], $2::int[], $3::text[], $4::uuid[]) AS u(payment_id, last_sequence, state, last_event_id)
		WHERE d.payment_id = u.payment_id`,
		pguuid.Arrays(ids), sequences, states, pguuid.Arrays(events))
	if err != nil {
		return fmt.Errorf("save payment progress: %w", err)
	}
	return nil
}

// insertViolations keeps the refused events; a redelivered one is kept once.
func insertViolations(ctx context.Context, tx pgx.Tx, violations []violation) error {
	n := len(violations)
	ids, payments := make([]uuid.UUID, n), make([]uuid.UUID, n)
	types, lastStates, reasons, topics := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	sequences, lastSequences, partitions := make([]int32, n), make([]int32, n), make([]int32, n)
	offsets := make([]int64, n)
	for i, v := range violations {
		ids[i], payments[i], types[i] = v.ev.id, v.ev.payload.PaymentID, v.ev.typ
		sequences[i], lastSequences[i], lastStates[i], reasons[i] = int32(v.ev.sequence), int32(v.before.sequence), v.before.lastType, v.reason
		topics[i], partitions[i], offsets[i] = v.ev.record.Topic, v.ev.record.Partition, v.ev.record.Offset
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO order_violations (event_id, payment_id, event_type, sequence, last_sequence, last_state, reason, topic, partition, "offset")
		SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::int[], $5::int[], $6::text[], $7::text[], $8::text[], $9::int[], $10::bigint[])
		ON CONFLICT (event_id) DO NOTHING`,
		pguuid.Arrays(ids), pguuid.Arrays(payments), types, sequences, lastSequences, lastStates, reasons, topics, partitions, offsets)
	if err != nil {
		return fmt.Errorf("insert order violations: %w", err)
	}
	return nil
}
