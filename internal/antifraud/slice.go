package antifraud

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// One transaction per poll keeps PostgreSQL on one core: the consumer waits for its
// statements, and their execution is the bound (docs/bench.md, "The consumer"). So a
// poll is split into slices that commit side by side, each on its own connection. The
// split is by user, for three reasons:
//
//   - every event of a payment carries its user, so a payment's events stay in one slice,
//     in the poll's order: the order check, parking and unparking see what one
//     transaction would;
//   - the rules look at a user's history (velocity, totals): with all of a user's events
//     of the poll in one slice, each decision is the one a single transaction would make;
//   - user_totals rows are shared by a user's payments only, so two slices never update
//     the same row and never wait for each other's locks. A split by partition would:
//     a user's payments are spread over partitions (the key is the payment id), and the
//     slices would take turns on most of the totals rows until commit, which is what three
//     instances in one group measure.

// A batchSlice is the part of a poll one transaction applies.
type batchSlice struct {
	unique []paymentEvent // the slice's events, one per event id, in poll order
	rows   []processedRow // their dedup rows, rows[i] for unique[i]
	poison []deadLetter   // the poll's poison records: the first slice stores them
}

// sliceBatch decodes the poll's records and splits them into at most
// Config.Parallelism slices. Copies of one event within the poll are folded into one
// row (a statement must not insert the same key twice), which counts the deliveries.
// A payment goes to the slice of the user of its first event in the poll, so that an
// event whose user differs from its payment's (a producer bug) cannot split the payment.
func (c *Consumer) sliceBatch(records []*kgo.Record) []batchSlice {
	slices := make([]batchSlice, c.cfg.Parallelism)
	type place struct{ slice, index int }
	seen := make(map[uuid.UUID]place, len(records))   // event id -> where its first copy went
	payments := make(map[uuid.UUID]int, len(records)) // payment id -> slice
	for i, d := range decodeAll(records, c.cfg.Parallelism) {
		r, ev, poison := records[i], d.ev, d.poison
		if poison != nil {
			slices[0].poison = append(slices[0].poison, newDeadLetter(r, poison))
			continue
		}
		if p, ok := seen[ev.id]; ok {
			slices[p.slice].rows[p.index].deliveries++
			continue
		}
		i, ok := payments[ev.payload.PaymentID]
		if !ok {
			i = sliceOf(ev.payload.UserID, len(slices))
			payments[ev.payload.PaymentID] = i
		}
		s := &slices[i]
		seen[ev.id] = place{i, len(s.unique)}
		s.unique = append(s.unique, ev)
		s.rows = append(s.rows, processedRow{
			eventID: ev.id, paymentID: ev.payload.PaymentID, eventType: ev.typ, sequence: ev.sequence,
			partition: r.Partition, offset: r.Offset, deliveries: 1,
		})
	}
	// A slice with nothing to do would still cost a begin and a commit.
	out := slices[:0]
	for _, s := range slices {
		if len(s.unique) > 0 || len(s.poison) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// A decoded record is what decodeRecord made of it.
type decoded struct {
	ev     paymentEvent
	poison *PoisonError
}

// decodeAll decodes the records on n goroutines, each a contiguous share. Decoding is the
// consumer's own CPU work, done before the poll's statements while PostgreSQL has nothing
// to do, so it uses both cores (docs/bench.md, "The consumer"); each record decodes on its
// own, so the shares are independent and out[i] is records[i]'s, as one loop makes it.
func decodeAll(records []*kgo.Record, n int) []decoded {
	out := make([]decoded, len(records))
	share := (len(records) + n - 1) / max(n, 1)
	var wg sync.WaitGroup
	for from := 0; from < len(records); from += share {
		to := min(from+share, len(records))
		wg.Go(func() {
			for i := from; i < to; i++ {
				out[i].ev, out[i].poison = decodeRecord(records[i])
			}
		})
	}
	wg.Wait()
	return out
}

// sliceOf returns the slice of a user's events among n: any hash that spreads users
// evenly and never changes within a poll would do.
func sliceOf(userID string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(userID)) // a hash.Hash never returns an error
	return int(h.Sum32() % uint32(n))
}

// processSlice applies one slice in one transaction: dedup rows, decisions, running
// totals and dead letters commit together or not at all.
func (c *Consumer) processSlice(ctx context.Context, s batchSlice) (batchResult, error) {
	res := batchResult{verdicts: map[Verdict]int{}, poison: s.poison}
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("begin batch: %w", err)
	}
	defer tx.Rollback(ctx) // a no-op once committed

	if len(s.rows) > 0 {
		if res.fresh, err = insertProcessed(ctx, tx, c.cfg.Topic, s.rows); err != nil {
			return res, err
		}
	}
	var seenBefore []processedRow
	var firstTime []paymentEvent
	for i, ev := range s.unique {
		if res.fresh[ev.id] {
			firstTime = append(firstTime, ev)
			res.processed++
			res.duplicates += s.rows[i].deliveries - 1
		} else {
			seenBefore = append(seenBefore, s.rows[i])
			res.duplicates += s.rows[i].deliveries
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
	applied, advanced, err := c.applyInOrder(ctx, tx, firstTime, &res)
	if err != nil {
		return res, err
	}
	if err := c.applyEffects(ctx, tx, applied, advanced, &res); err != nil {
		return res, err
	}
	if len(s.poison) > 0 {
		if err := insertDeadLetters(ctx, tx, s.poison); err != nil {
			return res, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("commit batch: %w", err)
	}
	return res, nil
}

// applyEffects decides the applied creations, saves the progress of the payments the
// applied events advanced (in the decision rows, hence after inserting them) and moves
// the running totals of every applied event.
func (c *Consumer) applyEffects(ctx context.Context, tx pgx.Tx, applied []paymentEvent, advanced map[uuid.UUID]progress, res *batchResult) error {
	if created := creations(applied); len(created) > 0 {
		decisions, err := c.decide(ctx, tx, created)
		if err != nil {
			return err
		}
		inserted, err := insertDecisions(ctx, tx, decisions)
		if err != nil {
			return err
		}
		if inserted != int64(len(decisions)) {
			// The order check lets one creation per payment through, and a payment
			// with a decision has progress, so this means another consumer decided the
			// payment meanwhile from a second creation event (a producer bug).
			c.logger.Warn("payment already had a decision, kept the first one",
				slog.Int("decisions", len(decisions)), slog.Int64("inserted", inserted))
		}
		for _, d := range decisions {
			res.verdicts[d.decision.Verdict]++
		}
	}
	if moved := beyondCreation(advanced); len(moved) > 0 {
		if err := saveProgress(ctx, tx, moved); err != nil {
			return err
		}
	}
	return moveTotals(ctx, tx, applied)
}
