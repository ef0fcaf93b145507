package poll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// The failure path of the relay, top to bottom: what a failed publish is, what it does
// to the event's row and to the relay, and why (docs/adr/0005).
//
// A publish fails in one of two ways, and everything below follows from telling them
// apart:
//
//   - A rejection: the broker refused this record for a reason of its own (too large,
//     invalid). Sending the same bytes again cannot succeed until someone changes
//     something, and only this event is at fault. Only an error about what the event
//     itself holds qualifies: one about what the relay adds to every record (the
//     timestamp, read from this host's clock; the CRC the client computes) is a fault
//     of the host, and counting it would dead-letter the whole backlog
//     (delivery.IsRejection).
//     The row counts one more attempt and one more rejection, keeps the error in
//     last_error, and waits for its own jittered backoff (next_attempt_at). The
//     rejection that reaches MaxRejections marks the row 'failed', copies it to
//     outbox_dlq and raises an alert; the row then holds back the later events of its
//     aggregate until an operator replays it.
//   - A transport failure: everything else (timeouts, refused connections, leader
//     changes, a closed client, an unknown topic, missing authorisation, a timestamp
//     refused because the host's clock is off, a corrupt CRC). The broker, the host or
//     the configuration is at fault, and every event would fail alike. The row counts
//     one more attempt and keeps the error, but its rejections do not change, so an
//     outage of any length dead-letters nothing. The row stays 'pending' and waits out
//     a backoff of its own on its attempts (OutageBackoffBase doubled per attempt, up
//     to OutageBackoffMax), which also sends it to the back of the queue: the claim
//     takes events in the order they became due (next_attempt_at, then seq), not in
//     commit order. That is what keeps one unavailable partition from stopping the
//     others: in commit order, its failed events would come straight back
//     to the head, fill every claim, fail every batch, and the healthy partitions
//     would publish nothing. Their aggregates' later events still wait for them (the
//     claim's order rule does not depend on the claim's order). A batch in which the
//     broker acknowledged nothing, while it acknowledged nothing else of this relay
//     either, means, as far as this relay can tell, a broker down for all: then the
//     whole Relay pauses too, none of its workers claims until the outage backoff has
//     passed, and each such batch doubles the pause, up to OutageBackoffMax, so that an
//     outage is not hammered by every worker. A partition that fails while the broker
//     acknowledges other records is one partition down, not the broker: it pauses
//     nothing, and the partition breaker (delivery.PartitionBreaker) holds its later
//     events back unsent, so that they do not hold every batch for a publish timeout
//     each.
//
// Before a rejection counts, the record is sent again on its own (isolate): the broker
// judges batches, not records, so a rejection shared with other records says only that
// one of them is at fault. Those resends are serialized per relay on a client of their
// own, and the whole batch stops one QueryTimeout before its lease ends: a record not
// resent by then is left unjudged, and the batch's commit hands it to a later claim
// unchanged. So no batch outlives its lease, however many of its records need a
// resend, and no other worker publishes rows this one is still working on.
//
// A batch in which the broker acknowledged a record, or no event hit a transport
// failure, ends the pause: the broker answered, even if only to refuse a record or
// for some partitions. Each Relay (each API replica) keeps its own pause; the rows say
// nothing about it. A batch abandoned at shutdown takes none of this path: its
// failures are the relay's own cancellation, and runOnce records none of them: its
// commit hands those rows back unchanged.
//
// The steps, in the order a batch takes them (batch.go), for the failed records only:
// publish hands each failed record to isolate, then to failureOf; runOnce hands the
// batch's failures to judgeFailures, which counts them and pauses or resumes the
// relay, then to record, which stores them in the batch's transaction
// (store.recordFailures), and alerts on each dead letter once that transaction has
// committed; work (relay.go) waits out the pause with backoff.Wait before it claims
// again. A batch without failures ends the pause in runOnce.

type failure struct {
	ID       uuid.UUID
	Err      string
	Rejected bool          // the broker refused this record: counts towards the DLQ
	RetryIn  time.Duration // per-event backoff before the row may be claimed again
	// HeldBack: the record was not sent, because its partition stopped answering
	// (delivery.PartitionBreaker). It counts no attempt and says nothing about the broker.
	HeldBack bool
	// Probed: a transport failure of a record sent to a partition that had stopped
	// answering already, as the breaker's probe. It says nothing about the others.
	Probed bool
}

// errNotJudged means the lease's deadline came before a rejected record could be sent
// on its own: the event is neither published nor failed, and its next claim judges it.
var errNotJudged = errors.New("lease deadline before the record could be sent on its own")

// isolate returns the error to judge e by, given the outcome err of its publish on the
// worker's own client. The broker judges a whole per-partition batch: one oversized
// record gets every record that shared its batch rejected, and that batch holds the
// other records of e's claim for the same partition. So a rejection there is not yet a
// verdict on e: isolate sends e again on alone, the
// relay's client for resends, one record at a time for the whole relay, and returns
// the error of that resend (nil when the broker took it), so only the culprit is
// counted towards the DLQ. Any other outcome, nil included, is returned as is.
//
// ctx carries the lease's deadline (runOnce): waiting for the turn and the resend both
// end with it, and a resend cut short by it returns errNotJudged rather than a
// transport failure, because the broker said nothing about e.
func (r *Relay) isolate(ctx context.Context, alone delivery.Producer, e claimedEvent, err error) error {
	if !delivery.IsRejection(err) {
		return err
	}
	select {
	case r.isolating <- struct{}{}:
	case <-ctx.Done():
		return errNotJudged
	}
	defer func() { <-r.isolating }()
	err = r.produce(ctx, alone, r.cfg.PublishTimeout, r.kafkaRecord(e))[0].Err
	if err != nil && ctx.Err() != nil {
		return errNotJudged
	}
	return err
}

// failureOf classifies the failed publish of e. A rejection is retried with
// exponential backoff on the event's rejection count; a transport failure with the
// outage backoff on its attempts, so that it leaves the head of the queue to events of
// healthy partitions (see the top of this file).
func (r *Relay) failureOf(e claimedEvent, err error) failure {
	f := failure{ID: e.ID, Err: err.Error()}
	if delivery.IsRejection(err) {
		f.Rejected = true
		f.RetryIn = backoff.Delay(r.cfg.RetryBase, r.cfg.RetryMax, e.Rejections)
		return f
	}
	f.RetryIn = backoff.Delay(r.cfg.OutageBackoffBase, r.cfg.OutageBackoffMax, e.Attempts)
	return f
}

// judgeFailures is the failure path of one batch with failures after its publish, of
// which acked events were acknowledged: it counts and logs the failures, and pauses the
// relay when the broker acknowledged nothing and a transport failure says it is down,
// or ends the pause when the broker answered: in this batch, or in another while this
// one waited (answered), which makes its failures a partition's, not the broker's.
// Records held back, or sent only as the probe of a partition known to be down
// (delivery.PartitionBreaker), say nothing about the broker: they neither pause the
// relay nor end its pause. record then stores every failure on its row
// (store.recordFailures), and runOnce alerts on each dead letter.
func (r *Relay) judgeFailures(acked int, failures []failure, answered bool) {
	var transport []failure
	rejected, outage := 0, 0
	for _, f := range failures {
		switch {
		case f.HeldBack:
			continue
		case f.Rejected:
			rejected++
			r.logger.Warn("broker rejected event",
				slog.String("event_id", f.ID.String()), slog.String("err", f.Err))
			continue
		case !f.Probed:
			outage++
		}
		transport = append(transport, f)
	}
	r.metrics.shared.CountFailures(false, len(transport))
	r.metrics.shared.CountFailures(true, rejected)

	switch {
	case acked > 0 || rejected > 0 || (outage > 0 && answered):
		// The broker answered, even if only to refuse a record or for some partitions.
		r.outage.succeeded()
		if len(transport) > 0 {
			r.logger.Warn("Kafka unavailable for some partitions; their events back off, the others flow",
				slog.Int("events", len(transport)), slog.Int("acked", acked), slog.String("err", transport[0].Err))
		}
	case outage > 0:
		pause := r.outage.failed()
		r.logger.Warn("Kafka unavailable; relay backs off, events stay pending",
			slog.Int("events", len(transport)), slog.Duration("pause", pause), slog.String("err", transport[0].Err))
	case len(transport) > 0:
		// Only a probe of partitions known to be down failed: that says nothing about
		// the broker, so the pause stays as it is. It is logged all the same: without
		// it, a relay whose probes keep failing would fall silent while nothing
		// publishes.
		r.logger.Warn("partitions that stopped answering still do not; their events stay held back",
			slog.Int("events", len(transport)), slog.String("err", transport[0].Err))
	}
	// Otherwise every record was held back, unsent: nothing new to say.
}

// recordFailures records failed publishes in the batch's transaction tx. Every failure
// sets last_error and counts an attempt, but for an event held back unsent
// (delivery.PartitionBreaker); only a rejection counts towards the DLQ, and the one that
// reaches maxRejections marks the event 'failed' and copies it to outbox_dlq in the
// same statement (why: failure.go). It returns the events it
// dead-lettered, for the alert, and then makes tx wait for the WAL flush at its
// commit: a dead letter raises an alert, and the operator's inbox must not lose an
// entry that someone was told about.
func (s store) recordFailures(ctx context.Context, tx pgx.Tx, failures []failure, maxRejections int) ([]outbox.DeadLetter, error) {
	ids := make([]uuid.UUID, len(failures))
	errs := make([]string, len(failures))
	rejected := make([]bool, len(failures))
	sent := make([]bool, len(failures))
	retrySecs := make([]float64, len(failures))
	for i, f := range failures {
		ids[i], errs[i], rejected[i], sent[i], retrySecs[i] = f.ID, f.Err, f.Rejected, !f.HeldBack, f.RetryIn.Seconds()
	}
	rows, _ := tx.Query(ctx, `
		WITH outcome AS (
			SELECT * FROM unnest($1::uuid[], $2::text[], $3::bool[], $4::float8[], $6::bool[])
				AS o(id, last_error, rejected, retry_secs, sent)
		), updated AS (
			UPDATE outbox_events e
			SET attempts = e.attempts + o.sent::int,
			    rejections = e.rejections + o.rejected::int,
			    last_error = o.last_error,
			    status = CASE WHEN o.rejected AND e.rejections + 1 >= $5 THEN 'failed' ELSE 'pending' END,
			    next_attempt_at = now() + make_interval(secs => o.retry_secs)
			FROM outcome o
			WHERE e.id = o.id
			RETURNING e.id, e.event_type, e.aggregate_id, e.payload, e.attempts, e.last_error, e.status
		)
		INSERT INTO outbox_dlq (event_id, event_type, aggregate_id, payload, attempts, last_error)
		SELECT id, event_type, aggregate_id, payload, attempts, last_error FROM updated
		WHERE status = 'failed'
		ON CONFLICT (event_id) DO UPDATE
			SET attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
			    failed_at = now(), replayed_at = NULL
		RETURNING event_id, event_type, aggregate_id, attempts, last_error, failed_at, replayed_at`,
		ids, errs, rejected, retrySecs, maxRejections, sent)
	dead, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("record publish failures: %w", err)
	}
	if len(dead) > 0 {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on`); err != nil {
			return nil, fmt.Errorf("record publish failures: wait for the flush: %w", err)
		}
	}
	return dead, nil
}

// scanDeadLetter reads a row of outbox_dlq as recordFailures returns it.
func scanDeadLetter(row pgx.CollectableRow) (outbox.DeadLetter, error) {
	var d outbox.DeadLetter
	err := row.Scan(&d.EventID, &d.EventType, &d.AggregateID, &d.Attempts, &d.LastError, &d.FailedAt, &d.ReplayedAt)
	return d, err
}
