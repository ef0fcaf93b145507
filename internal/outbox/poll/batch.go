package poll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// One batch, top to bottom, in the order it runs: runOnce claims rows in a transaction
// of their own (claim, ClaimSQL), publish sends them to Kafka while that transaction
// waits, idle, and record moves the acknowledged ones to outbox_published
// (markPublished) and commits. That is the whole success path; a record that fails
// leaves it for failure.go, and only that record does.
//
// A batch is one transaction (docs/adr/0002): the claim locks its rows (SELECT ... FOR
// UPDATE SKIP LOCKED), the relay publishes them with the transaction open and idle,
// then moves the acknowledged events to outbox_published, records the failures, and
// commits. The row locks are the lease: no other worker can claim a row while its
// batch's transaction lives, and the database itself ends a transaction left idle
// longer than the lease (idle_in_transaction_session_timeout), which releases the rows
// to the other workers and makes the late owner's outcome fail with its connection:
// that is the fencing, done by the server.
//
// The batch commits without waiting for the WAL flush (synchronous_commit = off) unless
// it dead-lettered an event: a crash of PostgreSQL can undo its last few commits, and
// undoing one can only make the relay publish again, never lose an event. Why: the WAL
// is replayed in order, so a crash undoes only the newest commits, never one that an
// fsync already covered, and every ordinary commit (the API's insert of an event)
// flushes all the WAL before it. What is undone, then, is the relay's own progress
// since some moment: events go back to outbox_events, pending, as they were before
// their batch, and are published again. Kafka gets duplicates, which consumers absorb
// by X-Event-Id; per-aggregate order holds by first occurrence, because the successor
// of an undone event had not been claimed in the state the crash went back to
// (durability_test.go).
//
// Queries that return rows ignore Query's error and check CollectRows' instead: pgx
// hands back rows that carry a failed Query's error, and CollectRows returns it
// (pgx's documented idiom), so each query has one error check and one message.

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

// claim begins a batch: a transaction that locks up to limit publishable rows. A row
// is publishable when it is pending, its backoff has passed, nobody else's batch holds
// it, and no earlier event of its aggregate is still in the outbox (pending, in
// another batch, or failed): that last rule keeps per-aggregate order with any number
// of workers and replicas, and makes a 'failed' event hold back the rest of its
// aggregate until it is replayed. The rule is checked only for rows written while an
// earlier event of their aggregate was in the outbox (may_have_predecessor, set by
// Insert): the others cannot be behind anything, and skipping their probe is most of
// what the claim saves (migrations/payments/00010). The claim takes rows in the order they became due,
// so a row that failed and backed off waits behind the rows committed meanwhile instead
// of holding the head (failure.go). SKIP LOCKED lets concurrent claims pass each other
// instead of queueing on the same rows.
//
// The transaction stays open, idle, while the relay publishes; the database ends it if
// it stays idle longer than lease. It returns a nil transaction when nothing was
// publishable. The caller ends a non-nil one with commit or rollback.
func (s store) claim(ctx context.Context, lease time.Duration, limit int) (pgx.Tx, []claimedEvent, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: BatchBeginSQL(lease)})
	if err != nil {
		return nil, nil, fmt.Errorf("claim outbox events: begin: %w", err)
	}
	rows, _ := tx.Query(ctx, ClaimSQL, limit) // error via CollectRows
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimedEvent, error) {
		var e claimedEvent
		err := row.Scan(&e.TID, &e.ID, &e.Seq, &e.Type, &e.AggregateID, &e.Payload, &e.CreatedAt, &e.Attempts, &e.Rejections, &e.Traceparent)
		return e, err
	})
	if err != nil || len(events) == 0 {
		rollback(tx)
		if err != nil {
			return nil, nil, fmt.Errorf("claim outbox events: %w", err)
		}
		return nil, nil, nil
	}
	return tx, events, nil
}

// claimedEvent is an outbox row a worker has leased.
type claimedEvent struct {
	// TID is where the row is (its ctid). It cannot change while the batch's
	// transaction holds the row's lock: only an update of the row or VACUUM FULL moves
	// a row, and both wait for the lock. So the mark finds the row by it without a
	// descent of the primary-key index per event (MarkClaimedSQL).
	TID         pgtype.TID
	ID          uuid.UUID
	Seq         int64
	Type        string
	AggregateID string
	Payload     []byte
	CreatedAt   time.Time
	Attempts    int
	Rejections  int
	// Traceparent is the writer's W3C trace context, "" when it traced nothing.
	Traceparent string
}

// ClaimSQL locks up to $1 publishable rows for the claiming transaction; see claim.
// Its plan must read the partial index of pending rows (plan_test.go). It is exported,
// with BatchBeginSQL and MarkClaimedSQL, for cmd/bench's SQL ladder, which runs the
// relay's statements without Kafka to price each guarantee in the database alone
// (docs/bench.md).
const ClaimSQL = `
		SELECT e.ctid, e.id, e.seq, e.event_type, e.aggregate_id, e.payload, e.created_at, e.attempts, e.rejections,
		       coalesce(e.traceparent, '')
		FROM outbox_events e
		WHERE e.status = 'pending'
		  AND e.next_attempt_at <= now()
		  AND (NOT e.may_have_predecessor OR NOT EXISTS (
			SELECT 1 FROM outbox_events earlier
			WHERE earlier.aggregate_id = e.aggregate_id
			  AND earlier.seq < e.seq))
		ORDER BY e.next_attempt_at, e.seq
		LIMIT $1
		FOR UPDATE SKIP LOCKED`

// BatchBeginSQL begins a batch's transaction: it commits without waiting for the WAL
// flush, and the database ends it once it has been idle for lease. Both settings last
// until the transaction ends, and travel with the BEGIN in one round trip. The lease is
// a whole number of milliseconds from the configuration, never user input.
func BatchBeginSQL(lease time.Duration) string {
	return fmt.Sprintf("BEGIN; SET LOCAL synchronous_commit = off; SET LOCAL idle_in_transaction_session_timeout = %d",
		lease.Milliseconds())
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
	send := records
	var admitted delivery.Admission
	var partitionOf map[*kgo.Record]int32
	// While every partition answers, the whole batch goes. Once one has stopped, the
	// breaker decides which records go and which wait (partitions.go).
	guarded := r.breaker.AnyOpen()
	if guarded {
		send, failures, admitted, partitionOf = r.holdBack(ctx, w.own, records, eventOf, timeout)
		if len(send) == 0 {
			return nil, failures, false
		}
	}

	spans := r.startPublishSpans(send, eventOf)
	sent := time.Now()
	results := r.produce(ctx, w.own, timeout, send...)
	w.timeouts.Judge(results)
	if guarded || results.FirstErr() != nil {
		partitionOf, answered = r.judgePartitions(ctx, w.own, admitted, sent, results, partitionOf)
	} else {
		// Every record was acknowledged: the breaker only needs to know that the broker
		// answered, which tells another worker's failures apart from an outage.
		r.breaker.Acked()
		answered = true
	}

	for _, res := range results {
		e := eventOf[res.Record]
		err := res.Err
		if err != nil {
			// The failure path (failure.go), for this record only: a rejection is
			// judged again on its own first, and may end acknowledged after all.
			err = r.isolate(ctx, w.alone, e, err)
		}
		spans.End(res.Record, err)
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

// kafkaRecord builds the Kafka record of an event. The key is the aggregate id, so one
// aggregate's events share a partition and keep their order for consumers.
func (r *Relay) kafkaRecord(e claimedEvent) *kgo.Record {
	envelope := event.Envelope{ID: e.ID, Type: e.Type, Key: e.AggregateID, OccurredAt: e.CreatedAt, Payload: e.Payload}
	return envelope.Record(r.cfg.Topic, time.Now())
}

// produce is one publish attempt bounded by timeout: a context deadline, backed by
// kgo.RecordDeliveryTimeout, so a broker that never answers cannot hold a worker.
func (r *Relay) produce(ctx context.Context, p delivery.Producer, timeout time.Duration, records ...*kgo.Record) kgo.ProduceResults {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	skewTimestamps(records, r.cfg.FaultTimestampSkew)
	return p.ProduceSync(ctx, records...)
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

// markPublished moves the claimed events published, which the broker acknowledged, to
// outbox_published, in the batch's transaction tx, which holds their rows. Every one of
// them must move: fewer would mean that a row was not where the claim found it, which
// the row lock rules out, and the error then rolls the batch back, so that its events
// are published again rather than marked on a guess.
func (s store) markPublished(ctx context.Context, tx pgx.Tx, published []claimedEvent) (int64, error) {
	tids := make([]pgtype.TID, len(published))
	for i, e := range published {
		tids[i] = e.TID
	}
	tag, err := tx.Exec(ctx, MarkClaimedSQL, tids)
	if err != nil {
		return 0, fmt.Errorf("mark outbox events published: %w", err)
	}
	if n := tag.RowsAffected(); n != int64(len(published)) {
		return 0, fmt.Errorf("mark outbox events published: moved %d of the %d claimed rows", n, len(published))
	}
	return tag.RowsAffected(), nil
}

// MarkClaimedSQL moves the events of the batch's own claim, found by their ctids $1
// (claimedEvent.TID), to outbox_published: the shared mark (delivery.MarkByIDSQL) by
// TID scan instead of an index descent per event.
const MarkClaimedSQL = delivery.MarkByTIDSQL

// rollback ends tx without recording anything: its row locks go, and the rows are
// claimable at once. Its error is of no use: a transaction that cannot be rolled back
// is on a broken connection, which the pool discards, and the server rolls it back.
func rollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// rollbackTimeout bounds a rollback, which is one round trip.
const rollbackTimeout = 5 * time.Second

// isLeaseExpired reports whether err says the database ended the batch's transaction
// because it stayed idle longer than the lease (SQLSTATE 25P03).
func isLeaseExpired(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == idleInTransactionSessionTimeout
}

// idleInTransactionSessionTimeout is the SQLSTATE of a session the server ended
// because its transaction stayed idle too long
// (https://www.postgresql.org/docs/15/errcodes-appendix.html).
const idleInTransactionSessionTimeout = "25P03"
