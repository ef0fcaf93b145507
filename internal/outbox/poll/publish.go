package poll

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// publish sends a claimed batch in one ProduceSync bounded by PublishTimeout and
// sorts the events into acknowledged and failed; failure.go says what a failure is and
// what becomes of it. The records of a partition that stopped answering are held back
// instead, unsent, and count as failures that no attempt caused (delivery.PartitionBreaker). An event
// that is neither acknowledged nor failed was not judged before ctx's deadline (the
// lease's, see runOnce): the batch's commit leaves its row as it was, and a later claim
// takes it again. It runs no statement: the batch's transaction waits, idle.
//
// answered reports whether the broker acknowledged a record of this relay, in this
// batch or another, while the batch waited: if it did, the batch's transport failures
// are about their partitions, not about the broker.
func (r *Relay) publish(ctx context.Context, w *worker, events []claimedEvent) (published []claimedEvent, failures []failure, answered bool) {
	records := make([]*kgo.Record, len(events))
	byRecord := make(map[*kgo.Record]claimedEvent, len(events))
	for i, e := range events {
		records[i] = r.kafkaRecord(e)
		byRecord[records[i]] = e
	}
	var partitionOf map[*kgo.Record]int32
	if r.breaker.AnyOpen() {
		partitionOf = r.partitionsOf(ctx, w.own, records)
	}
	timeout := w.timeouts.Next(r.cfg.PublishTimeout, r.publishBudget())
	admitted := r.breaker.Admit(records, partitionOf, timeout)

	var send []*kgo.Record
	var sendEvents []claimedEvent
	for _, rec := range records {
		if wait, held := admitted.HoldFor[rec]; held {
			failures = append(failures, r.heldBack(byRecord[rec], partitionOf[rec], wait))
			continue
		}
		send, sendEvents = append(send, rec), append(sendEvents, byRecord[rec])
	}
	if len(send) == 0 {
		return nil, failures, false
	}
	spans := r.startPublishSpans(sendEvents, send)
	sent := time.Now()
	results := r.produce(ctx, w.own, timeout, send...)
	w.timeouts.Judge(results)
	partitionOf, answered = r.judgePartitions(ctx, w.own, admitted, sent, results, partitionOf)

	for _, res := range results {
		e := byRecord[res.Record]
		// A rejection on the worker's own client is judged again on its own first.
		err := r.isolate(ctx, w.alone, e, res.Err)
		spans.end(res.Record, err)
		switch {
		case errors.Is(err, errNotJudged):
			continue
		case err != nil:
			f := r.failureOf(e, err)
			f.Probed = partitionOf != nil && admitted.Probed[partitionOf[res.Record]]
			failures = append(failures, f)
			continue
		}
		published = append(published, e)
		r.metrics.shared.ObserveCommitToPublish(time.Since(e.CreatedAt))
	}
	return published, failures, answered
}

// judgePartitions tells the breaker, partition by partition, what the broker made of a
// batch's records sent at sent, and reports whether the broker answered this relay
// meanwhile (publish). It returns the partition of each record when it knows them. It
// needs to know where the records went only when some hit a transport failure while
// the broker answered (a partition may have stopped answering), or when a partition
// was open already (partitionOf is given); otherwise it only ends the batch's probe, if
// any.
func (r *Relay) judgePartitions(ctx context.Context, p producer, admitted delivery.Admission, sent time.Time, results kgo.ProduceResults, partitionOf map[*kgo.Record]int32) (map[*kgo.Record]int32, bool) {
	var anyAcked, anyTransport bool
	for _, res := range results {
		anyAcked = anyAcked || res.Err == nil
		anyTransport = anyTransport || (res.Err != nil && !delivery.IsRejection(res.Err))
	}
	if anyAcked {
		r.breaker.Acked() // once per batch: it takes the breaker's lock
	}
	answered := r.breaker.AnsweredSince(sent)
	if partitionOf == nil && anyTransport && answered {
		records := make([]*kgo.Record, len(results))
		for i, res := range results {
			records[i] = res.Record
		}
		partitionOf = r.partitionsOf(ctx, p, records)
	}
	r.breaker.Judge(admitted, results, partitionOf, answered)
	r.metrics.shared.SetPartitionsUnavailable(r.breaker.OpenCount())
	return partitionOf, answered
}

// partitionsOf is the partition of each record (delivery.PartitionsOf), asking
// the client's metadata cache for the partition count under one QueryTimeout.
func (r *Relay) partitionsOf(ctx context.Context, p producer, records []*kgo.Record) map[*kgo.Record]int32 {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	return delivery.PartitionsOf(ctx, p, r.cfg.Topic, records)
}

// heldBack is the failure of an event whose partition's breaker is open: it was not
// sent, waits until the breaker may let it through, and counts no attempt.
func (r *Relay) heldBack(e claimedEvent, partition int32, wait time.Duration) failure {
	r.metrics.shared.CountHeldBack(1)
	return failure{ID: e.ID, HeldBack: true, RetryIn: wait,
		Err: fmt.Sprintf("held back, not sent: partition %d stopped answering while others did", partition)}
}

// publishBudget is the longest a batch's publish can take: it must end one
// QueryTimeout before the lease does (runOnce), so that the batch can still be
// recorded.
func (r *Relay) publishBudget() time.Duration { return r.cfg.Lease - r.cfg.QueryTimeout }

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
