package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// publish sends a claimed batch in one ProduceSync bounded by PublishTimeout and
// sorts the events into acknowledged and failed; failure.go says what a failure is and
// what becomes of it. An event that is neither was not judged before ctx's deadline
// (the lease's, see runOnce): the batch's commit leaves its row as it was, and a later
// claim takes it again. It runs no statement: the batch's transaction waits, idle.
func (r *Relay) publish(ctx context.Context, p producers, events []claimedEvent) ([]claimedEvent, []failure) {
	records := make([]*kgo.Record, len(events))
	byRecord := make(map[*kgo.Record]claimedEvent, len(events))
	for i, e := range events {
		records[i] = r.kafkaRecord(e)
		byRecord[records[i]] = e
	}
	spans := r.startPublishSpans(events, records)
	results := r.produce(ctx, p.own, records...)

	var published []claimedEvent
	var failures []failure
	for _, res := range results {
		e := byRecord[res.Record]
		// A rejection on the worker's own client is judged again on its own first.
		err := r.isolate(ctx, p.alone, e, res.Err)
		spans.end(res.Record, err)
		switch {
		case errors.Is(err, errNotJudged):
			continue
		case err != nil:
			failures = append(failures, r.failureOf(e, err))
			continue
		}
		published = append(published, e)
		r.metrics.commitToPublish.Observe(time.Since(e.CreatedAt).Seconds())
	}
	return published, failures
}

// produce is one bounded publish attempt: a context deadline, backed by
// kgo.RecordDeliveryTimeout, so a broker that never answers cannot hold a worker.
func (r *Relay) produce(ctx context.Context, p producer, records ...*kgo.Record) kgo.ProduceResults {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
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
