package cdc

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// The prober: the goroutine that sends the parked events (parking.go) while the
// publisher goes on with the stream. Every OutageBackoffBase (and at once after a turn
// that got events acknowledged) it takes the first parked event of each aggregate, up
// to BatchSize of them, and asks the partition breaker which of them may go: those of
// a closed partition (it answered again, and these wait only behind their aggregate's
// earlier events), and those of an open partition once its backoff is over, as the
// partition's probe. One produce call at a time, so at most one call waits on a
// partition that may still be down, and never the publisher's.
//
// What the broker says of a parked event:
//
//   - acknowledged: marked published, unparked; its aggregate's next parked event goes
//     at the next turn, and its batch may be confirmed once all its parts are done.
//   - transport failure: counted on its row (attempts, last_error) and left parked.
//     The breaker keeps its partition open, for twice as long; nothing is dead-lettered,
//     however long the partition stays down.
//   - rejection: the publisher's rule (resendRejected): sent again on its own, and
//     dead-lettered after MaxRejections. Its aggregate's later parked events then follow
//     it to the DLQ (holdBack), as in the stream.

// probe runs the prober until ctx ends or a mark fails. done reports a batch whose
// parts are all done.
func (r *Relay) probe(ctx context.Context, p delivery.Producer, lot *parkingLot, done func(batch int)) error {
	ticker := time.NewTicker(r.cfg.OutageBackoffBase)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		// A turn that got events acknowledged goes on at once: a partition that
		// answers again is drained at its own pace, not one batch per tick.
		for {
			progressed, err := r.probeOnce(ctx, p, lot, done)
			r.metrics.parked.Set(float64(lot.size()))
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if !progressed || ctx.Err() != nil {
				break
			}
		}
	}
}

// probeOnce sends what the breaker lets through of the first parked event of each
// aggregate, and settles each by the broker's answer. It reports whether the broker
// acknowledged any of them.
func (r *Relay) probeOnce(ctx context.Context, p delivery.Producer, lot *parkingLot, done func(batch int)) (bool, error) {
	r.noteParked(ctx, lot)
	heads := lot.heads(time.Now(), r.cfg.BatchSize)
	if len(heads) == 0 {
		return false, nil
	}
	records := make([]*kgo.Record, len(heads))
	for i, e := range heads {
		records[i] = r.record(e.outboxEvent)
	}
	partitionOf := r.partitionsOf(ctx, p, records)
	admitted := r.breaker.Admit(records, partitionOf, r.probeTimeouts.Next(r.cfg.PublishTimeout, r.maxPublishTimeout()))
	var send []*parkedEvent
	var sendRecords []*kgo.Record
	for i, rec := range records {
		if _, held := admitted.HoldFor[rec]; !held {
			send, sendRecords = append(send, heads[i]), append(sendRecords, rec)
		}
	}
	send, sendRecords, err := r.unparkBlocked(ctx, lot, send, sendRecords, done)
	if err != nil || len(send) == 0 {
		r.breaker.Judge(admitted, nil, nil, false) // ends the probe, if this was one
		return false, err
	}

	sent := time.Now()
	results := r.send(ctx, p, sendRecords, &r.probeTimeouts)
	var acked, transport, rejected []*parkedEvent
	var transportErr error
	for i, res := range results {
		switch {
		case res.Err == nil:
			r.breaker.Acked()
			acked = append(acked, send[i])
			r.metrics.shared.ObserveCommitToPublish(time.Since(send[i].CreatedAt))
		case delivery.IsRejection(res.Err):
			rejected = append(rejected, send[i])
		default:
			transport, transportErr = append(transport, send[i]), res.Err
		}
	}
	r.breaker.Judge(admitted, results, partitionOf, r.breaker.AnsweredSince(sent))
	r.metrics.shared.SetPartitionsUnavailable(r.breaker.OpenCount())

	if err := r.unparkAcked(ctx, lot, acked, done); err != nil {
		return false, err
	}
	if len(transport) > 0 {
		r.probeFailed(ctx, lot, transport, transportErr)
	}
	for _, e := range rejected {
		ok, err := r.resendRejected(ctx, p, e.outboxEvent)
		if err != nil {
			return false, err
		}
		if ok {
			err = r.unparkAcked(ctx, lot, []*parkedEvent{e}, done)
		} else if lot.leave(e) { // dead-lettered
			done(e.batch)
		}
		if err != nil {
			return false, err
		}
	}
	switch left := lot.size(); {
	case len(acked) > 0 && left == 0:
		r.logger.Info("every parked event published")
	case len(acked) > 0:
		r.logger.Debug("parked events published", slog.Int("events", len(acked)), slog.Int("still_parked", left))
	}
	return len(acked) > 0, nil
}

// unparkBlocked dead-letters the events of send whose aggregate has an event in the
// DLQ (holdBack), unparks them, and returns the others with their records.
func (r *Relay) unparkBlocked(ctx context.Context, lot *parkingLot, send []*parkedEvent, records []*kgo.Record, done func(int)) ([]*parkedEvent, []*kgo.Record, error) {
	if len(send) == 0 {
		return nil, nil, nil
	}
	events := make([]outboxEvent, len(send))
	for i, e := range send {
		events[i] = e.outboxEvent
	}
	queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	kept, err := r.holdBack(queryCtx, events)
	cancel()
	if err != nil || len(kept) == len(send) {
		return send, records, err
	}
	keep := make(map[uuid.UUID]bool, len(kept))
	for _, e := range kept {
		keep[e.ID] = true
	}
	var outEvents []*parkedEvent
	var outRecords []*kgo.Record
	for i, e := range send {
		if keep[e.ID] {
			outEvents, outRecords = append(outEvents, e), append(outRecords, records[i])
		} else if lot.leave(e) {
			done(e.batch)
		}
	}
	return outEvents, outRecords, nil
}

// unparkAcked marks the acknowledged parked events published and unparks them.
func (r *Relay) unparkAcked(ctx context.Context, lot *parkingLot, acked []*parkedEvent, done func(int)) error {
	if len(acked) == 0 {
		return nil
	}
	// Not cut short by ctx, as the markers' marks: these events are on the topic.
	markCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.QueryTimeout)
	err := r.markAcked(markCtx, parkedIDs(acked))
	cancel()
	if err != nil {
		return err // left parked: the batch is never confirmed, the next session republishes
	}
	for _, e := range acked {
		if lot.leave(e) {
			done(e.batch)
		}
	}
	return nil
}

// probeFailed records a transport failure of parked events on their rows and counts
// it. Those of an open partition wait for the breaker; the others (their partition
// answers, or the broker answered nothing) wait the outage backoff of their attempts.
func (r *Relay) probeFailed(ctx context.Context, lot *parkingLot, failed []*parkedEvent, cause error) {
	byPartition := map[int32][]uuid.UUID{}
	for _, e := range failed {
		byPartition[e.partition] = append(byPartition[e.partition], e.ID)
	}
	for part, ids := range byPartition {
		reason := fmt.Sprintf("parked: partition %d does not answer: %v", part, cause)
		if part < 0 {
			reason = "parked: " + cause.Error()
		}
		r.recordTransportFailure(ctx, ids, reason, "failed probe")
	}
	for _, e := range failed {
		if e.partition < 0 || !r.breaker.IsOpen(e.partition) {
			lot.backOff(e, r.cfg.OutageBackoffBase, r.cfg.OutageBackoffMax)
		}
	}
	r.logger.Warn("parked events still not taken by their partition; they stay parked",
		slog.Int("events", len(failed)), slog.Int("parked", lot.size()), slog.Any("err", cause))
}

// noteParked writes on the rows of newly parked events why they wait (last_error),
// for GET /payments/{id} and operators, without counting an attempt: they were not
// sent. A failed note only costs the explanation.
func (r *Relay) noteParked(ctx context.Context, lot *parkingLot) {
	byPartition := map[int32][]uuid.UUID{}
	for _, e := range lot.unnoted() {
		byPartition[e.partition] = append(byPartition[e.partition], e.ID)
	}
	for part, ids := range byPartition {
		reason := fmt.Sprintf("parked, not sent: partition %d stopped answering while others did", part)
		if part < 0 {
			reason = "parked, not sent: an earlier event of its aggregate waits for its partition"
		}
		r.metrics.shared.CountHeldBack(len(ids))
		queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
		err := r.store.recordHeldBack(queryCtx, ids, reason)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.logger.Warn("note parked events on their rows", slog.Any("err", err))
		}
	}
}
