package poll

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/outbox"
)

// One batch, top to bottom: runOnce claims rows in a transaction of their own, publish
// sends them to Kafka while that transaction waits, idle, and record moves the
// acknowledged ones to outbox_published and commits. That is the whole success path;
// a record that fails leaves it for failure.go, and only that record does.

// runOnce claims one batch, publishes it and records the outcome, all in the batch's
// transaction (store.claim). It returns how many events it claimed. woken says what
// made the worker claim, for the metrics.
func (r *Relay) runOnce(ctx context.Context, w *worker, woken wakeSource) (int, error) {
	// The lease is measured from before the claim: the database's idle timer starts
	// after it, so a deadline taken from this clock read ends first.
	leaseStart := time.Now()
	tx, events, err := r.claim(ctx)
	if err != nil || len(events) == 0 {
		return 0, err
	}
	r.busy.found(&w.streak, len(events) == r.cfg.BatchSize)
	r.metrics.observeClaim(woken, events)
	if len(events) == r.cfg.BatchSize {
		r.nudge(wokenByFullBatch) // there is probably more: let an idle worker take it
	}
	start := time.Now()
	// The publish, resends on their own included, ends one QueryTimeout before the
	// lease does, which leaves the recording below its QueryTimeout: so the whole batch
	// is over while the lease holds, however many records need a resend, and the
	// database never has to end this transaction under a worker that is still working
	// on its rows (docs/adr/0002).
	leaseCtx, cancelLease := context.WithDeadline(ctx, leaseStart.Add(r.publishBudget()))
	published, failures, answered := r.publish(leaseCtx, w, events)
	cancelLease()

	// Record what happened even if ctx was cancelled meanwhile: acknowledged events
	// must be marked, or they are published again after the lease. The fault injection
	// FaultHoldBeforeMark may hold them past it first.
	r.holdBeforeMark(ctx, published)
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.QueryTimeout)
	defer cancel()
	switch {
	case ctx.Err() != nil:
		// Abandoned at shutdown: the failures are our own cancellation, not the
		// broker's. Mark what was acknowledged; the commit hands the rest back.
		failures = nil
	case len(failures) > 0:
		// The failure path (failure.go): count the failures, and pause the relay or
		// end its pause.
		r.judgeFailures(len(published), failures, answered)
	case len(published) > 0:
		r.outage.succeeded() // the broker answered: a pause of the relay is over
	}
	dead, err := r.record(recordCtx, tx, published, failures)
	if err != nil {
		return len(events), err
	}
	r.alerter.DeadLettered(recordCtx, dead)
	r.metrics.shared.ObserveBatch(time.Since(start))
	return len(events), nil
}

// claim begins a batch: the transaction, and the rows it locks (store.claim), under one
// QueryTimeout.
func (r *Relay) claim(ctx context.Context) (pgx.Tx, []claimedEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	return r.store.claim(ctx, r.cfg.Lease, r.cfg.BatchSize)
}

// publish sends a claimed batch in one ProduceSync bounded by the worker's publish
// timeout and sorts the events into acknowledged and failed; failure.go says what a
// failure is and what becomes of it. The records of a partition that stopped answering
// are held back instead, unsent, and count as failures that no attempt caused
// (partitions.go). An event that is neither acknowledged nor failed was not judged
// before ctx's deadline (the lease's, see runOnce): the batch's commit leaves its row
// as it was, and a later claim takes it again. It runs no statement: the batch's
// transaction waits, idle.
//
// answered reports whether the broker acknowledged a record of this relay, in this
// batch or another, while the batch waited: if it did, the batch's transport failures
// are about their partitions, not about the broker.
func (r *Relay) publish(ctx context.Context, w *worker, events []claimedEvent) (published []claimedEvent, failures []failure, answered bool) {
	records := make([]*kgo.Record, len(events))
	eventOf := make(map[*kgo.Record]claimedEvent, len(events))
	for i, e := range events {
		records[i] = r.kafkaRecord(e)
		eventOf[records[i]] = e
	}
	timeout := w.timeouts.Next(r.cfg.PublishTimeout, r.publishBudget())
	send, failures, admitted, partitionOf := r.holdBack(ctx, w.own, records, eventOf, timeout)
	if len(send) == 0 {
		return nil, failures, false
	}

	spans := r.startPublishSpans(send, eventOf)
	sent := time.Now()
	results := r.produce(ctx, w.own, timeout, send...)
	w.timeouts.Judge(results)
	partitionOf, answered = r.judgePartitions(ctx, w.own, admitted, sent, results, partitionOf)

	for _, res := range results {
		e := eventOf[res.Record]
		err := res.Err
		if err != nil {
			// The failure path (failure.go), for this record only: a rejection is
			// judged again on its own first, and may end acknowledged after all.
			err = r.isolate(ctx, w.alone, e, err)
		}
		spans.end(res.Record, err)
		switch {
		case err == nil:
			published = append(published, e)
			r.metrics.shared.ObserveCommitToPublish(time.Since(e.CreatedAt))
		case errors.Is(err, errNotJudged):
			// Left as it is, for a later claim to judge.
		default:
			f := r.failureOf(e, err)
			f.Probed = partitionOf != nil && admitted.Probed[partitionOf[res.Record]]
			failures = append(failures, f)
		}
	}
	return published, failures, answered
}

// produce is one publish attempt bounded by timeout: a context deadline, backed by
// kgo.RecordDeliveryTimeout, so a broker that never answers cannot hold a worker.
func (r *Relay) produce(ctx context.Context, p producer, timeout time.Duration, records ...*kgo.Record) kgo.ProduceResults {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	skewTimestamps(records, r.cfg.FaultTimestampSkew)
	return p.ProduceSync(ctx, records...)
}

// kafkaRecord builds the Kafka record of an event. The key is the aggregate id, so one
// aggregate's events share a partition and keep their order for consumers.
func (r *Relay) kafkaRecord(e claimedEvent) *kgo.Record {
	envelope := event.Envelope{ID: e.ID, Type: e.Type, Key: e.AggregateID, OccurredAt: e.CreatedAt, Payload: e.Payload}
	return envelope.Record(r.cfg.Topic, time.Now())
}

// publishBudget is the longest a batch's publish can take: it must end one
// QueryTimeout before the lease does (runOnce), so that the batch can still be
// recorded.
func (r *Relay) publishBudget() time.Duration { return r.cfg.Lease - r.cfg.QueryTimeout }

// record ends a batch: it moves the acknowledged events to outbox_published, stores
// the failures, and commits tx, then counts what it marked. It returns the events it
// dead-lettered, for the alert, which must follow the commit: an operator is told
// only about a dead letter that is in the DLQ. Any error leaves tx rolled back: the
// rows are claimable again, and the acknowledged ones are published again.
func (r *Relay) record(ctx context.Context, tx pgx.Tx, published []claimedEvent, failures []failure) ([]outbox.DeadLetter, error) {
	marked, dead, err := r.recordInTx(ctx, tx, published, failures)
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		rollback(tx)
		if isLeaseExpired(err) {
			// The batch outlived its lease, and the database ended its transaction:
			// another worker publishes these events again. The recording above
			// prevents this, so it means this worker was stopped (paused, starved).
			r.metrics.leasesExpired.Inc()
			r.logger.Warn("lease expired before the batch was recorded; its events will be published again",
				slog.Int("events", len(published)+len(failures)), slog.Int("acknowledged", len(published)))
		}
		return nil, err
	}
	r.metrics.shared.CountPublished(marked)
	r.metrics.shared.CountDeadLettered(len(dead))
	return dead, nil
}

func (r *Relay) recordInTx(ctx context.Context, tx pgx.Tx, published []claimedEvent, failures []failure) (int64, []outbox.DeadLetter, error) {
	var marked int64
	if len(published) > 0 {
		var err error
		if marked, err = r.store.markPublished(ctx, tx, published); err != nil {
			return 0, nil, err
		}
	}
	if len(failures) == 0 {
		return marked, nil, nil
	}
	dead, err := r.store.recordFailures(ctx, tx, failures, r.cfg.MaxRejections)
	return marked, dead, err
}
