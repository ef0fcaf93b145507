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
// fails with an error about the data, its records are processed again one transaction
// each, and the one that fails alone is dead-lettered as PoisonStoreFailed. The rules:
//
//   - Only an error about the data leads here (isDataError). The database being down,
//     restarting or too busy fails every record alike and is retried by handle, with
//     backoff, however long it lasts: a good record is never dead-lettered for it.
//   - A record is dead-lettered only if it fails on its own, so its batch-mates are never
//     charged with its fault.
//   - Any other error during the isolation ends it, and handle retries the whole batch:
//     records that committed alone meanwhile come back as counted duplicates.

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

// isolate processes records one transaction each, after their batch failed with the data
// error batchErr, and returns what they did together.
func (c *Consumer) isolate(ctx context.Context, records []*kgo.Record, batchErr error) (batchResult, error) {
	c.logger.Warn("batch refused by the database, processing its records one by one",
		slog.Int("records", len(records)), slog.Any("err", batchErr))
	total := batchResult{verdicts: map[Verdict]int{}}
	for _, r := range records {
		if err := ctx.Err(); err != nil {
			// Shutting down: handle leaves the rest for the next owner.
			return total, err
		}
		res, err := c.processAlone(ctx, r)
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
