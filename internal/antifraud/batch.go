package antifraud

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// A batchResult counts what one batch did, for metrics and logs.
type batchResult struct {
	processed  int             // events seen for the first time, each with a decision
	duplicates int             // deliveries of events already processed, in earlier batches or this one
	poison     []deadLetter    // records stored as dead letters
	verdicts   map[Verdict]int // decisions by verdict
}

// processBatch applies the records of one poll to the database in one transaction:
// dedup rows, decisions and dead letters commit together or not at all. When it returns
// nil, every record is done for good and its offset may be committed; when it returns an
// error, nothing was written and the records must be processed again.
func (c *Consumer) processBatch(ctx context.Context, records []*kgo.Record) (batchResult, error) {
	res := batchResult{verdicts: map[Verdict]int{}}

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
			eventID: ev.id, paymentID: ev.payload.PaymentID,
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
	if len(firstTime) > 0 {
		decisions, err := c.decide(ctx, tx, firstTime)
		if err != nil {
			return res, err
		}
		inserted, err := insertDecisions(ctx, tx, decisions)
		if err != nil {
			return res, err
		}
		if inserted != int64(len(decisions)) {
			// Only possible if the producer sent two events with different ids for one
			// payment: the first decision stands, and someone should look at the producer.
			c.logger.Warn("payment already had a decision, kept the first one",
				slog.Int("decisions", len(decisions)), slog.Int64("inserted", inserted))
		}
		for _, d := range decisions {
			res.verdicts[d.decision.Verdict]++
		}
	}
	if len(res.poison) > 0 {
		if err := insertDeadLetters(ctx, tx, res.poison); err != nil {
			return res, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("commit batch: %w", err)
	}

	for _, ev := range unique {
		if !fresh[ev.id] {
			c.logger.Debug("duplicate event absorbed", slog.String("event_id", ev.id.String()),
				slog.Int("partition", int(ev.record.Partition)), slog.Int64("offset", ev.record.Offset))
		}
	}
	return res, nil
}

// decide runs the rules on the events seen for the first time. The velocity history of
// each user is what the database knows (decisions already committed, by any consumer)
// plus the other first-time events of this batch, which are not in the table yet.
func (c *Consumer) decide(ctx context.Context, tx pgx.Tx, events []paymentEvent) ([]decisionRow, error) {
	window := c.cfg.Rules.VelocityWindow

	// One query window per user, wide enough for all of the user's events in the batch.
	windows := map[string]*velocityWindow{}
	var batchPayments []Payment
	for _, ev := range events {
		p := paymentOf(ev)
		batchPayments = append(batchPayments, p)
		from := p.OccurredAt.Add(-window)
		w, ok := windows[p.UserID]
		if !ok {
			windows[p.UserID] = &velocityWindow{userID: p.UserID, from: from, to: p.OccurredAt}
			continue
		}
		if from.Before(w.from) {
			w.from = from
		}
		if p.OccurredAt.After(w.to) {
			w.to = p.OccurredAt
		}
	}
	list := make([]velocityWindow, 0, len(windows))
	for _, w := range windows {
		list = append(list, *w)
	}
	known, err := recentPayments(ctx, tx, list)
	if err != nil {
		return nil, err
	}
	history := map[string][]Payment{}
	for _, p := range append(known, batchPayments...) {
		history[p.UserID] = append(history[p.UserID], p)
	}

	rows := make([]decisionRow, len(events))
	for i, ev := range events {
		p := batchPayments[i]
		rows[i] = decisionRow{
			paymentID:  ev.payload.PaymentID,
			eventID:    ev.id,
			userID:     ev.payload.UserID,
			amount:     ev.payload.Amount,
			currency:   ev.payload.Currency,
			decision:   c.cfg.Rules.Decide(p, history[p.UserID]),
			occurredAt: ev.occurredAt,
		}
	}
	return rows, nil
}

// paymentOf is the part of an event the rules look at. The time is the event's
// X-Event-Occurred-At, the moment the producer committed the payment.
func paymentOf(ev paymentEvent) Payment {
	return Payment{ID: ev.payload.PaymentID, UserID: ev.payload.UserID, Amount: ev.payload.Amount, OccurredAt: ev.occurredAt}
}

func newDeadLetter(r *kgo.Record, poison *PoisonError) deadLetter {
	return deadLetter{
		topic: r.Topic, partition: r.Partition, offset: r.Offset,
		key: r.Key, headers: event.HeaderValues(r), value: r.Value,
		reason: poison.Reason, detail: poison.Detail,
	}
}
