package antifraud

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// A batchResult counts what one batch did, for metrics and logs.
type batchResult struct {
	processed  int             // events seen for the first time (each applied creation is decided)
	duplicates int             // deliveries of events already processed, in earlier batches or this one
	poison     []deadLetter    // records stored as dead letters
	verdicts   map[Verdict]int // decisions by verdict
	violations []violation     // first-time events refused by the order check (order.go)
	parked     parkedCounts    // events parked and unparked (park.go)
	parkedNow  *int64          // events in parked_events after the batch, when it parked or unparked any
}

// processBatch applies the records of one poll to the database in one transaction:
// dedup rows, decisions, running totals and dead letters commit together or not at all.
// When it returns nil, every record is done for good and its offset may be committed; when
// it returns an error, nothing was written and the records must be processed again.
func (c *Consumer) processBatch(ctx context.Context, records []*kgo.Record) (batchResult, error) {
	res := batchResult{verdicts: map[Verdict]int{}}
	started := time.Now() // the decisions' spans cover the batch (trace.go)

	// Decode outside the transaction, and fold copies of one event within the batch into
	// one row: a statement must not insert the same key twice.
	var unique []paymentEvent
	var rows []processedRow
	index := map[uuid.UUID]int{} // event id -> position in unique and rows
	for _, r := range records {
		ev, poison := decodeRecord(r)
		if poison != nil {
			res.poison = append(res.poison, newDeadLetter(r, poison))
			continue
		}
		if i, seen := index[ev.id]; seen {
			rows[i].deliveries++
			continue
		}
		index[ev.id] = len(unique)
		unique = append(unique, ev)
		rows = append(rows, processedRow{
			eventID: ev.id, paymentID: ev.payload.PaymentID, eventType: ev.typ, sequence: ev.sequence,
			partition: r.Partition, offset: r.Offset, deliveries: 1,
		})
	}

	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("begin batch: %w", err)
	}
	defer tx.Rollback(ctx) // a no-op once committed

	var fresh map[uuid.UUID]bool
	if len(rows) > 0 {
		if fresh, err = insertProcessed(ctx, tx, c.cfg.Topic, rows); err != nil {
			return res, err
		}
	}
	var seenBefore []processedRow
	var firstTime []paymentEvent
	for i, ev := range unique {
		if fresh[ev.id] {
			firstTime = append(firstTime, ev)
			res.processed++
			res.duplicates += rows[i].deliveries - 1
		} else {
			seenBefore = append(seenBefore, rows[i])
			res.duplicates += rows[i].deliveries
		}
	}
	if len(seenBefore) > 0 {
		if err := countRedeliveries(ctx, tx, seenBefore); err != nil {
			return res, err
		}
	}
	// Only events seen for the first time reach the effects: the decisions, whose primary
	// key would absorb a redelivery anyway, and the running totals, which would count it
	// again. This guard is what makes the totals exact. Of those, only the events that
	// follow their payment's last applied one are applied (order.go).
	applied, err := c.applyInOrder(ctx, tx, firstTime, &res)
	if err != nil {
		return res, err
	}
	if created := creations(applied); len(created) > 0 {
		decisions, err := c.decide(ctx, tx, created)
		if err != nil {
			return res, err
		}
		inserted, err := insertDecisions(ctx, tx, decisions)
		if err != nil {
			return res, err
		}
		if inserted != int64(len(decisions)) {
			// The order check lets one creation per payment through, so this means a
			// decision the database had before payment_progress existed.
			c.logger.Warn("payment already had a decision, kept the first one",
				slog.Int("decisions", len(decisions)), slog.Int64("inserted", inserted))
		}
		for _, d := range decisions {
			res.verdicts[d.decision.Verdict]++
		}
		if err := addToTotals(ctx, tx, paymentsOf(created)); err != nil {
			return res, err
		}
	}
	if err := subtractFromTotals(ctx, tx, applied); err != nil {
		return res, err
	}
	if len(res.poison) > 0 {
		if err := insertDeadLetters(ctx, tx, res.poison); err != nil {
			return res, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("commit batch: %w", err)
	}

	c.traceDecisions(ctx, started, records, fresh)
	for _, ev := range unique {
		if !fresh[ev.id] {
			c.logger.Debug("duplicate event absorbed", slog.String("event_id", ev.id.String()),
				slog.Int("partition", int(ev.record.Partition)), slog.Int64("offset", ev.record.Offset))
		}
	}
	return res, nil
}

// applyInOrder checks the first-time events against their payments' progress, records
// the progress they make and the violations, and returns the events to apply.
func (c *Consumer) applyInOrder(ctx context.Context, tx pgx.Tx, firstTime []paymentEvent, res *batchResult) ([]paymentEvent, error) {
	if len(firstTime) == 0 {
		return nil, nil
	}
	known, err := selectProgress(ctx, tx, firstTime)
	if err != nil {
		return nil, err
	}
	applied, refused, advanced := inOrder(known, firstTime)
	var violations []violation
	var parked []paymentEvent
	for _, v := range refused {
		if v.reason == OrderMissingPredecessor {
			parked = append(parked, v.ev) // its predecessor may still come (park.go)
		} else {
			violations = append(violations, v)
		}
	}
	unparked, more, counts, err := c.unpark(ctx, tx, parked, applied, advanced)
	if err != nil {
		return nil, err
	}
	applied, violations = append(applied, unparked...), append(violations, more...)
	res.parked = counts
	if counts.parked > 0 || counts.unparked > 0 {
		n, err := countParked(ctx, tx)
		if err != nil {
			return nil, err
		}
		res.parkedNow = &n
	}
	// The parked events of the batch have no dedup row; those unparked (of this batch or
	// an earlier one) have one now.
	res.processed += len(unparked) + len(more) - len(parked)
	if len(advanced) > 0 {
		if err := saveProgress(ctx, tx, advanced); err != nil {
			return nil, err
		}
	}
	if len(violations) > 0 {
		if err := insertViolations(ctx, tx, violations); err != nil {
			return nil, err
		}
	}
	res.violations = violations
	return applied, nil
}

// creations returns the PaymentCreated events of events, in order.
func creations(events []paymentEvent) []paymentEvent {
	var created []paymentEvent
	for _, ev := range events {
		if ev.typ == event.TypePaymentCreated {
			created = append(created, ev)
		}
	}
	return created
}

// decide runs the rules on the events seen for the first time, in batch order. What is
// known of a user before a payment is what the database knows (decisions and totals
// already committed, by any consumer) plus the batch's other first-time events: for
// velocity, those that occurred in the window before the payment, in event time; for the
// totals, those that come before it in the batch, the order in which the totals grow.
func (c *Consumer) decide(ctx context.Context, tx pgx.Tx, events []paymentEvent) ([]decisionRow, error) {
	rules := c.cfg.Rules
	payments := paymentsOf(events)
	recent, err := countRecent(ctx, tx, payments, rules.VelocityWindow)
	if err != nil {
		return nil, err
	}
	totals, err := selectTotals(ctx, tx, payments)
	if err != nil {
		return nil, err
	}
	byUser := map[string][]Payment{} // the batch's payments of each user
	for _, p := range payments {
		byUser[p.UserID] = append(byUser[p.UserID], p)
	}

	rows := make([]decisionRow, len(events))
	for i, ev := range events {
		p := payments[i]
		key := totalKey{p.UserID, p.Currency}
		h := History{Recent: recent[i], Total: totals[key]}
		for _, other := range byUser[p.UserID] {
			if rules.inVelocityWindow(p, other) {
				h.Recent++
			}
		}
		totals[key] = totals[key].plus(p.Amount)
		rows[i] = decisionRow{
			paymentID:  ev.payload.PaymentID,
			eventID:    ev.id,
			userID:     ev.payload.UserID,
			amount:     ev.payload.Amount,
			currency:   ev.payload.Currency,
			decision:   rules.Decide(p, h),
			occurredAt: ev.occurredAt,
		}
	}
	return rows, nil
}

// paymentsOf returns the part of each event the rules look at. The time is the event's
// X-Event-Occurred-At, the moment the producer committed the payment.
func paymentsOf(events []paymentEvent) []Payment {
	payments := make([]Payment, len(events))
	for i, ev := range events {
		payments[i] = Payment{
			ID: ev.payload.PaymentID, UserID: ev.payload.UserID, Amount: ev.payload.Amount,
			Currency: ev.payload.Currency, OccurredAt: ev.occurredAt,
		}
	}
	return payments
}

func newDeadLetter(r *kgo.Record, poison *PoisonError) deadLetter {
	return deadLetter{
		topic: r.Topic, partition: r.Partition, offset: r.Offset,
		key: r.Key, headers: event.HeaderValues(r), value: r.Value,
		reason: poison.Reason, detail: storableText(poison.Detail),
	}
}
