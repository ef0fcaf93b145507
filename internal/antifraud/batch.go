package antifraud

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// A batchResult counts what one batch did, for metrics and logs.
type batchResult struct {
	processed  int                // events seen for the first time (each applied creation is decided)
	duplicates int                // deliveries of events already processed, in earlier batches or this one
	poison     []deadLetter       // records stored as dead letters
	verdicts   map[Verdict]int    // decisions by verdict
	violations []violation        // first-time events refused by the order check (order.go)
	parked     parkedCounts       // events parked and unparked (park.go)
	parkedNow  *int64             // events in parked_events after the batch, when it parked or unparked any
	fresh      map[uuid.UUID]bool // ids of the events seen for the first time (insertProcessed)
}

// processBatch applies the records of one poll to the database. Each record's dedup row,
// decision, running totals or dead letter commits in one transaction with the others of
// its slice (slice.go): the poll is split by user into Config.Parallelism slices, whose
// transactions run side by side on their own connections, so that PostgreSQL works on
// as many cores. When it returns nil, every record is done for good and its offset may be
// committed; when it returns an error, the records must be processed again: a slice that
// committed meanwhile comes back as counted duplicates, one that failed wrote nothing.
func (c *Consumer) processBatch(ctx context.Context, records []*kgo.Record) (batchResult, error) {
	started := time.Now() // the decisions' spans cover the batch (trace.go)
	slices := c.sliceBatch(records)
	results := make([]batchResult, len(slices))
	errs := make([]error, len(slices))
	var wg sync.WaitGroup
	for i, s := range slices {
		wg.Go(func() { results[i], errs[i] = c.processSlice(ctx, s) })
	}
	wg.Wait()

	res := batchResult{verdicts: map[Verdict]int{}, fresh: map[uuid.UUID]bool{}}
	for _, r := range results {
		res.add(r)
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	if res.parked.parked > 0 || res.parked.unparked > 0 {
		// Counted once every slice committed, so the gauge sees them all.
		if n, err := countParked(ctx, c.pool); err != nil {
			c.logger.Warn("count parked events", slog.Any("err", err))
		} else {
			res.parkedNow = &n
		}
	}

	c.traceDecisions(ctx, started, records, res.fresh)
	for _, s := range slices {
		for _, ev := range s.unique {
			if !res.fresh[ev.id] {
				c.logger.Debug("duplicate event absorbed", slog.String("event_id", ev.id.String()),
					slog.Int("partition", int(ev.record.Partition)), slog.Int64("offset", ev.record.Offset))
			}
		}
	}
	return res, nil
}

// applyInOrder checks the first-time events against their payments' progress, records
// the violations, and returns the events to apply and the progress of each payment they
// advance. The progress is saved by applyEffects, once the decision rows that keep it
// exist (slice.go).
func (c *Consumer) applyInOrder(ctx context.Context, tx pgx.Tx, firstTime []paymentEvent, res *batchResult) ([]paymentEvent, map[uuid.UUID]progress, error) {
	if len(firstTime) == 0 {
		return nil, nil, nil
	}
	known, err := selectProgress(ctx, tx, firstTime)
	if err != nil {
		return nil, nil, err
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
		return nil, nil, err
	}
	applied, violations = append(applied, unparked...), append(violations, more...)
	res.parked = counts
	// The parked events of the batch have no dedup row; those unparked (of this batch or
	// an earlier one) have one now.
	res.processed += len(unparked) + len(more) - len(parked)
	if len(violations) > 0 {
		if err := insertViolations(ctx, tx, violations); err != nil {
			return nil, nil, err
		}
	}
	res.violations = violations
	return applied, advanced, nil
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
	recent, totals, err := selectHistory(ctx, tx, payments, rules.VelocityWindow, rules.VelocityBlock)
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
