package antifraud

import (
	"context"
	"errors"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A poll is applied in a few transactions (slice.go), so one record that the database
// refuses fails every attempt at its whole batch, and with BlockRebalanceOnPoll the partition stalls
// for this member and for the next owner alike. decodeRecord is meant to refuse such a
// record first; isolation is the last line of defence for a check it misses: when a batch
// fails with an error about the data, its records are processed again in smaller
// transactions, and the one that fails alone is dead-lettered as PoisonStoreFailed. The rules:
//
//   - Only an error about the data leads here (isDataError). The database being down,
//     restarting or too busy fails every record alike and is retried by handle, with
//     backoff, however long it lasts: a good record is never dead-lettered for it.
//   - A record is dead-lettered only if it fails on its own, so its batch-mates are never
//     charged with its fault.
//   - Any other error during the isolation ends it, and handle retries the whole batch:
//     records that committed in a part meanwhile come back as counted duplicates.

// isDataError reports whether err is PostgreSQL refusing the data of a statement, which
// fails the same way on every attempt, rather than a failure of the connection or of the
// server, which passes (internal/payment/dberrors.go classifies those for the API).
// Anything that is not an answer of the server (a lost connection, a timeout) is not.
func isDataError(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	if !ok {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", // data_exception: text PostgreSQL cannot store, a number out of range
		"23", // integrity_constraint_violation: a CHECK or NOT NULL the row breaks
		"54": // program_limit_exceeded: an index row too large, say
		return true
	}
	// Connection (08), operator intervention (57: shutdown, statement timeout), resources
	// (53), serialization and deadlocks (40), and our own bugs (42: a missing table) are
	// about the server or the code: retried, never a record's fault.
	return false
}

// isolate processes records again after their batch failed with the data error batchErr,
// and returns what they did together. It splits them in halves, in order, and processes
// each half as a batch; a half that fails on its data is split again, down to the one
// record that fails alone. A batch of n records with one such record costs about
// 2·log2(n) transactions instead of n, which keeps the partition (and, with
// BlockRebalanceOnPoll, any rebalance) waiting for a poll of thousands of records a
// fraction of a second rather than seconds. A half that committed before a later one failed
// comes back, when its records are processed again, as counted duplicates.
func (c *Consumer) isolate(ctx context.Context, records []*kgo.Record, batchErr error) (batchResult, error) {
	c.logger.Warn("batch refused by the database, splitting it to find the records it refuses",
		slog.Int("records", len(records)), slog.Any("err", batchErr))
	return c.bisect(ctx, records)
}

// bisect processes the two halves of records, a batch that failed on its data.
func (c *Consumer) bisect(ctx context.Context, records []*kgo.Record) (batchResult, error) {
	if len(records) == 1 {
		return c.processAlone(ctx, records[0])
	}
	total := batchResult{verdicts: map[Verdict]int{}}
	mid := len(records) / 2
	for _, half := range [][]*kgo.Record{records[:mid], records[mid:]} {
		if err := ctx.Err(); err != nil {
			// Shutting down: handle leaves the rest for the next owner.
			return total, err
		}
		halfCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.BatchTimeout)
		res, err := c.processBatch(halfCtx, half)
		cancel()
		if isDataError(err) {
			res, err = c.bisect(ctx, half)
		}
		if err != nil {
			return total, err
		}
		total.add(res)
	}
	return total, nil
}

// processAlone processes one record in a transaction of its own. If the database refuses
// its data, the record is dead-lettered instead, in another transaction: the first one
// wrote nothing.
func (c *Consumer) processAlone(ctx context.Context, r *kgo.Record) (batchResult, error) {
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.BatchTimeout)
	defer cancel()
	res, err := c.processBatch(recordCtx, []*kgo.Record{r})
	if !isDataError(err) {
		return res, err
	}
	letter := newDeadLetter(r, &PoisonError{PoisonStoreFailed, err.Error()})
	// insertDeadLetters stores any bytes (FuzzDecodeAndStore checks it), so this cannot
	// fail on the record; if the server fails it, handle retries the batch.
	err = pgx.BeginFunc(recordCtx, c.pool, func(tx pgx.Tx) error {
		return insertDeadLetters(recordCtx, tx, []deadLetter{letter})
	})
	if err != nil {
		return batchResult{}, err
	}
	return batchResult{poison: []deadLetter{letter}, verdicts: map[Verdict]int{}}, nil
}

// add counts o into r.
func (r *batchResult) add(o batchResult) {
	r.processed += o.processed
	r.duplicates += o.duplicates
	r.poison = append(r.poison, o.poison...)
	r.violations = append(r.violations, o.violations...)
	for verdict, n := range o.verdicts {
		r.verdicts[verdict] += n
	}
	r.parked.parked += o.parked.parked
	r.parked.unparked += o.parked.unparked
	r.parked.waiting += o.parked.waiting
	if o.parkedNow != nil {
		r.parkedNow = o.parkedNow
	}
	for id := range o.fresh {
		if r.fresh == nil {
			r.fresh = map[uuid.UUID]bool{}
		}
		r.fresh[id] = true
	}
}
