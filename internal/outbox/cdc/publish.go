package cdc

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// The publish path of the CDC relay, with the polling relay's failure rules
// (docs/adr/0005) bent to an ordered stream that cannot leave an event behind and come
// back to it:
//
//   - A transport failure (broker down, timeout, anything that is not the record's
//     fault) is retried with the relay's outage backoff for as long as it lasts. The
//     stream waits, the slot keeps its position, and the WAL it holds grows
//     (outbox_cdc_wal_retained_bytes); nothing is dead-lettered.
//   - Unless the broker answered for other records meanwhile: then one partition
//     stopped answering, not the broker (parkFailed). The partition breaker opens it,
//     and its events, with every later event of their aggregates, are parked beside the
//     stream (parking.go) while the stream goes on; the slot stays behind them. Events
//     of an open partition are parked without being sent (parkWaiting).
//   - A rejection (delivery.IsRejection: the broker refused this record) is first checked
//     by sending the record on its own, since the broker judges whole batches. A record
//     still refused is retried after RetryBase doubled per rejection; the one that
//     reaches MaxRejections goes to the DLQ and the stream moves on. A poison record
//     holds the stream for about the sum of those waits, never for ever.
//   - The later events of an aggregate whose event is in the DLQ go to the DLQ behind
//     it (the polling relay holds them in the table; the stream cannot), so that an
//     operator replays them in order.
//
// publish returns only when every event of the batch is acknowledged, dead-lettered or
// parked, or when ctx ends (then nothing of the batch may be confirmed). Marking the
// acknowledged ones is the caller's: the stream's markers (pipeline.go) or the
// catch-up (publishAndMark).

// publish sends events (in stream order), records every failure on its rows, and
// returns the ids the broker acknowledged. The events go out in waves of at most one
// event per aggregate, so that an aggregate's next event is sent only once its previous
// one is acknowledged or dead-lettered: the broker's verdicts on one produce call come
// back together, and a later event sent in the same call could land on the topic before
// its predecessor is judged. The outbox of payments has one event per aggregate, so a
// batch is one wave.
//
// lot, when set, is where the events of a partition that stopped answering are parked
// (parking.go), as parts of batch number batch: publish returns without them, and the
// prober publishes them later. The catch-up has no lot, and waits for every event.
func (r *Relay) publish(ctx context.Context, p delivery.Producer, events []outboxEvent, lot *parkingLot, batch int) ([]uuid.UUID, error) {
	var acked []uuid.UUID
	for len(events) > 0 {
		var wave []outboxEvent
		wave, events = firstPerAggregate(events)
		ok, err := r.publishWave(ctx, p, wave, lot, batch)
		if err != nil {
			return nil, err
		}
		r.unmarked.add(ok)
		acked = append(acked, ok...)
	}
	return acked, nil
}

// publishAndMark publishes events and marks the acknowledged ones before it returns:
// the catch-up's path, which runs before the stream and needs no pipeline.
func (r *Relay) publishAndMark(ctx context.Context, p delivery.Producer, events []outboxEvent) error {
	acked, err := r.publish(ctx, p, events, nil, 0)
	if err != nil || len(acked) == 0 {
		return err
	}
	markCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.QueryTimeout)
	defer cancel()
	return r.markAcked(markCtx, acked)
}

// markAcked moves the acknowledged events acked to the history and counts them. An
// event the mark cannot find is logged and left: Kafka has it, and the stream must not
// wait on a row it cannot find (store.markPublished looks again for a moment first).
func (r *Relay) markAcked(ctx context.Context, acked []uuid.UUID) error {
	defer r.unmarked.remove(acked)
	unmarked, err := r.store.markPublished(ctx, acked)
	if err != nil {
		return err
	}
	if len(unmarked) > 0 {
		r.logger.Warn("acknowledged events not found in the outbox to mark published; left as they are",
			slog.Int("events", len(unmarked)), slog.String("first_event_id", unmarked[0].String()))
	}
	r.metrics.shared.CountPublished(int64(len(acked)))
	return nil
}

// deadLetter moves the event id to the DLQ with reason, counts it and raises its
// alert. It reports whether it moved the event: one dead-lettered already (a restart
// streamed it again) is left as it is, and raises nothing.
func (r *Relay) deadLetter(ctx context.Context, id uuid.UUID, reason string) (bool, error) {
	dead, err := r.store.deadLetter(ctx, id, reason)
	if err != nil || dead == nil {
		return false, err
	}
	r.metrics.shared.CountDeadLettered(1)
	r.alertDeadLetter(ctx, dead)
	return true, nil
}

// firstPerAggregate splits events into the first event of each aggregate and the rest,
// both in their original order.
func firstPerAggregate(events []outboxEvent) (first, rest []outboxEvent) {
	seen := make(map[string]bool, len(events))
	for _, e := range events {
		if seen[e.AggregateID] {
			rest = append(rest, e)
			continue
		}
		seen[e.AggregateID] = true
		first = append(first, e)
	}
	return first, rest
}

// publishWave publishes events of distinct aggregates until each is acknowledged,
// dead-lettered or parked (in lot, when set), and returns the acknowledged ones.
func (r *Relay) publishWave(ctx context.Context, p delivery.Producer, events []outboxEvent, lot *parkingLot, batch int) ([]uuid.UUID, error) {
	queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	held, err := r.holdBack(queryCtx, events)
	cancel()
	if err != nil {
		return nil, err
	}

	var acked []uuid.UUID
	var rejected []outboxEvent
	outage := 0
	for len(held) > 0 {
		records := r.records(held)
		if lot != nil {
			if held, records, err = r.parkWaiting(ctx, p, lot, batch, held, records); err != nil {
				return nil, err
			}
			if len(held) == 0 {
				break
			}
		}
		results := r.send(ctx, p, records, &r.publishTimeouts)
		var transport []outboxEvent
		var transportErr error
		ackedBefore := len(acked)
		for i, res := range results {
			switch {
			case res.Err == nil:
				acked = append(acked, held[i].ID)
				r.metrics.shared.ObserveCommitToPublish(time.Since(held[i].CreatedAt))
			case delivery.IsRejection(res.Err):
				rejected = append(rejected, held[i])
			default:
				transport, transportErr = append(transport, held[i]), res.Err
			}
		}
		if len(acked) > ackedBefore {
			r.breaker.Acked() // once per call: it takes the breaker's lock
		}
		if len(transport) > 0 && lot != nil {
			if transport, err = r.parkFailed(ctx, p, lot, batch, held, results); err != nil {
				return nil, err
			}
		}
		held = transport
		if len(held) == 0 {
			break
		}
		outage++
		if err := r.recordOutage(ctx, held, transportErr, outage); err != nil {
			return nil, err
		}
	}
	for _, e := range rejected {
		ok, err := r.resendRejected(ctx, p, e)
		if err != nil {
			return nil, err
		}
		if ok {
			acked = append(acked, e.ID)
		}
	}
	return acked, nil
}

// parkWaiting parks the events that must not be sent now: those whose aggregate has
// parked events (they wait behind them), and those of a partition the breaker holds
// open. It returns the others, with their records.
func (r *Relay) parkWaiting(ctx context.Context, p delivery.Producer, lot *parkingLot, batch int, events []outboxEvent, records []*kgo.Record) ([]outboxEvent, []*kgo.Record, error) {
	var partitionOf map[*kgo.Record]int32
	if r.breaker.AnyOpen() {
		partitionOf = r.partitionsOf(ctx, p, records)
	}
	var keep []outboxEvent
	var keepRecords []*kgo.Record
	for i, e := range events {
		partition, known := partitionOf[records[i]]
		if !known {
			partition = -1
		}
		if !lot.holds(e.AggregateID) && (!known || !r.breaker.IsOpen(partition)) {
			keep, keepRecords = append(keep, e), append(keepRecords, records[i])
			continue
		}
		if err := lot.park(ctx, e, batch, partition, false); err != nil {
			return nil, nil, err
		}
	}
	r.metrics.parked.Set(float64(lot.size()))
	return keep, keepRecords, nil
}

// parkFailed judges the transport failures among the results of a call (results[i] is
// events[i]'s): when the broker answered this relay since a publisher last parked a
// failed call, the failures are their partitions', not the broker's, and the breaker
// opens those partitions (delivery.PartitionBreaker). The failed events of an open
// partition are recorded on their rows and parked; the other failed events, returned,
// are an outage, retried in place.
//
// "Since the last parked failure" is where the CDC relay differs from the polling
// relay, which asks whether the broker answered while the batch waited: on a quiet
// stream one publisher is at work, so while its call waits no other call can answer,
// and a batch of one event on a silent partition would look like a broker down for all,
// holding the stream for the whole cut. Under this rule a broker down for all costs one
// misjudged batch per publisher that failed at the same moment: its partitions open and
// its events are parked; the next batches fail with no answer since, and wait in place.
func (r *Relay) parkFailed(ctx context.Context, p delivery.Producer, lot *parkingLot, batch int, events []outboxEvent, results kgo.ProduceResults) ([]outboxEvent, error) {
	var failed []outboxEvent
	var cause error
	for i, res := range results {
		if res.Err != nil && !delivery.IsRejection(res.Err) {
			failed, cause = append(failed, events[i]), res.Err
		}
	}
	answered := r.breaker.AnsweredSince(lot.failedParkAt(false))
	if !answered {
		return failed, nil
	}
	lot.failedParkAt(true)
	records := make([]*kgo.Record, len(results))
	for i, res := range results {
		records[i] = res.Record
	}
	partitionOf := r.partitionsOf(ctx, p, records)
	if partitionOf == nil {
		return failed, nil // where the records went is unknown: an outage
	}
	r.breaker.Judge(delivery.Admission{}, results, partitionOf, answered)
	r.metrics.shared.SetPartitionsUnavailable(r.breaker.OpenCount())

	var park []outboxEvent
	var parkPartitions []int32
	failed = failed[:0]
	for i, res := range results {
		if res.Err == nil || delivery.IsRejection(res.Err) {
			continue
		}
		if part := partitionOf[res.Record]; r.breaker.IsOpen(part) {
			park, parkPartitions = append(park, events[i]), append(parkPartitions, part)
		} else {
			failed = append(failed, events[i])
		}
	}
	if len(park) == 0 {
		return failed, nil
	}
	byPartition := map[int32][]uuid.UUID{}
	for i, e := range park {
		byPartition[parkPartitions[i]] = append(byPartition[parkPartitions[i]], e.ID)
	}
	for part, ids := range byPartition {
		reason := fmt.Sprintf("parked: partition %d stopped answering while others did: %v", part, cause)
		r.recordTransportFailure(ctx, ids, reason, "failed publish")
	}
	for i, e := range park {
		if err := lot.park(ctx, e, batch, parkPartitions[i], true); err != nil {
			return nil, err
		}
	}
	r.metrics.parked.Set(float64(lot.size()))
	r.logger.Warn("partition stopped answering while others did; its events are parked and the stream goes on",
		slog.Int("events", len(park)), slog.Int("parked", lot.size()), slog.Any("err", cause))
	return failed, nil
}

// holdBack dead-letters the events of an aggregate blocked by an earlier event in the
// DLQ (store.blockedAggregates) and returns the others, in order.
func (r *Relay) holdBack(ctx context.Context, events []outboxEvent) ([]outboxEvent, error) {
	blocked, err := r.store.blockedAggregates(ctx, events, r.unmarked.list())
	if err != nil || len(blocked) == 0 {
		return events, err
	}
	var out []outboxEvent
	for _, e := range events {
		if !blocked[e.AggregateID] {
			out = append(out, e)
			continue
		}
		moved, err := r.deadLetter(ctx, e.ID, "held back: an earlier event of aggregate "+e.AggregateID+" is in the DLQ")
		if err != nil {
			return nil, err
		}
		if !moved {
			continue // dead-lettered already, before a restart streamed it again (never "not found": deadLetter waits for the row)
		}
		r.logger.Warn("event held back behind a dead-lettered event of its aggregate",
			slog.String("event_id", e.ID.String()), slog.String("aggregate_id", e.AggregateID))
	}
	return out, nil
}

// recordOutage counts a transport failure of events, stores it on their rows (attempts
// and last_error, never rejections) and waits out the outage backoff of the n-th
// consecutive failure. The replication connection stays alive meanwhile on its own:
// the receiver goes on sending status updates (receiver.go).
func (r *Relay) recordOutage(ctx context.Context, events []outboxEvent, cause error, n int) error {
	pause := backoff.Delay(r.cfg.OutageBackoffBase, r.cfg.OutageBackoffMax, n-1)
	r.logger.Warn("publish failed; Kafka unreachable? retrying the same events", slog.Int("events", len(events)),
		slog.Any("err", cause), slog.Duration("retry_in", pause))
	r.recordTransportFailure(ctx, ids(events), cause.Error(), "outage")
	return wait(ctx, pause)
}

// recordTransportFailure counts a transport failure of each event in ids and stores it
// on their rows (attempts and last_error = reason, never a rejection). The rows'
// attempts are for operators only: a failed store is logged as "record the <what> on
// the rows" and the stream goes on without it.
func (r *Relay) recordTransportFailure(ctx context.Context, ids []uuid.UUID, reason, what string) {
	r.metrics.shared.CountFailures(false, len(ids))
	queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	_, err := r.store.recordAttempt(queryCtx, ids, false, reason)
	cancel()
	if err != nil && ctx.Err() == nil {
		r.logger.Warn("record the "+what+" on the rows", slog.Any("err", err))
	}
}

// resendRejected sends a rejected event on its own until the broker takes it (true),
// it reaches MaxRejections and goes to the DLQ (false), or ctx ends. A transport
// failure on the way is an outage: it is retried and does not count.
func (r *Relay) resendRejected(ctx context.Context, p delivery.Producer, e outboxEvent) (bool, error) {
	outage := 0
	for {
		err := r.produce(ctx, p, e)[0]
		switch {
		case err == nil:
			return true, nil
		case !delivery.IsRejection(err):
			outage++
			if err := r.recordOutage(ctx, []outboxEvent{e}, err, outage); err != nil {
				return false, err
			}
			continue
		}
		outage = 0
		r.metrics.shared.CountFailures(true, 1)
		queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
		counts, recordErr := r.store.recordAttempt(queryCtx, []uuid.UUID{e.ID}, true, err.Error())
		cancel()
		if recordErr != nil {
			return false, recordErr // the count decides the DLQ: never guess it
		}
		rejections := counts[e.ID]
		if rejections >= r.cfg.MaxRejections {
			deadCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
			_, deadErr := r.deadLetter(deadCtx, e.ID, err.Error())
			cancel()
			if deadErr != nil {
				return false, deadErr
			}
			r.logger.Error("event dead-lettered after repeated rejections; the stream moves on",
				slog.String("event_id", e.ID.String()), slog.String("aggregate_id", e.AggregateID),
				slog.Int("rejections", rejections), slog.Any("err", err))
			return false, nil
		}
		if err := wait(ctx, backoff.Delay(r.cfg.RetryBase, r.cfg.RetryMax, rejections-1)); err != nil {
			return false, err
		}
	}
}

// produce is one bounded publish attempt of events, with each event's outcome at the
// event's index.
func (r *Relay) produce(ctx context.Context, p delivery.Producer, events ...outboxEvent) []error {
	results := r.send(ctx, p, r.records(events), &r.publishTimeouts)
	errs := make([]error, len(results))
	for i, res := range results {
		errs[i] = res.Err
	}
	return errs
}

// records builds the Kafka records of events, in order.
func (r *Relay) records(events []outboxEvent) []*kgo.Record {
	now := time.Now().Add(r.cfg.FaultTimestampSkew)
	out := make([]*kgo.Record, len(events))
	for i, e := range events {
		out[i] = r.recordAt(e, now)
	}
	return out
}

// record builds the Kafka record of e.
func (r *Relay) record(e outboxEvent) *kgo.Record {
	return r.recordAt(e, time.Now().Add(r.cfg.FaultTimestampSkew))
}

func (r *Relay) recordAt(e outboxEvent, now time.Time) *kgo.Record {
	envelope := event.Envelope{ID: e.ID, Type: e.Type, Key: e.AggregateID, OccurredAt: e.CreatedAt, Payload: e.Payload}
	rec := envelope.Record(r.cfg.Topic, now)
	if e.Traceparent != "" {
		rec.Context = withTraced(e)
	}
	return rec
}

// maxPublishTimeout is the longest the back-off of send lets a publish take: four
// times PublishTimeout. The CDC relay holds no lease, so nothing else bounds it.
func (r *Relay) maxPublishTimeout() time.Duration { return 4 * r.cfg.PublishTimeout }

// send is one bounded publish attempt of records, within the timeout that timeouts
// gives it: PublishTimeout, doubled after each send in a row with a transport failure
// (delivery.PublishTimeouts says why: a slow broker would make every retry time out), up
// to four times PublishTimeout. It returns the results in the order of records:
// ProduceSync returns them in the order the broker's answers came.
func (r *Relay) send(ctx context.Context, p delivery.Producer, records []*kgo.Record, timeouts *delivery.PublishTimeouts) kgo.ProduceResults {
	index := make(map[*kgo.Record]int, len(records))
	for i, rec := range records {
		index[rec] = i
	}
	ctx, cancel := context.WithTimeout(ctx, timeouts.Next(r.cfg.PublishTimeout, r.maxPublishTimeout()))
	defer cancel()
	spans := r.startPublishSpans(records)
	out := make(kgo.ProduceResults, len(records))
	for _, res := range p.ProduceSync(ctx, records...) {
		out[index[res.Record]] = res
		spans.End(res.Record, res.Err)
	}
	timeouts.Judge(out)
	return out
}

// partitionsOf is the partition of each record, by the rule the relay's client
// partitions with (delivery.ClientOpts pins), or nil when the topic's partition count is
// unknown.
func (r *Relay) partitionsOf(ctx context.Context, p delivery.Producer, records []*kgo.Record) map[*kgo.Record]int32 {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	return delivery.PartitionsOf(ctx, p, r.cfg.Topic, records)
}

// wait waits d (backoff.Wait), and returns ctx's error if ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	if !backoff.Wait(ctx, d) {
		return ctx.Err()
	}
	return nil
}

func ids(events []outboxEvent) []uuid.UUID {
	out := make([]uuid.UUID, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}
