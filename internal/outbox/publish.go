package outbox

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// publish sends a claimed batch in one ProduceSync bounded by PublishTimeout and
// sorts the events into acknowledged and failed. It opens no transaction.
func (r *Relay) publish(ctx context.Context, p producer, events []claimedEvent) ([]uuid.UUID, []failure) {
	records := make([]*kgo.Record, len(events))
	byRecord := make(map[*kgo.Record]claimedEvent, len(events))
	for i, e := range events {
		records[i] = r.kafkaRecord(e)
		byRecord[records[i]] = e
	}
	results := r.produce(ctx, p, records...)

	var published []uuid.UUID
	var failures []failure
	var rejected []claimedEvent
	for _, res := range results {
		e := byRecord[res.Record]
		switch {
		case res.Err == nil:
			published = append(published, e.ID)
			r.metrics.commitToPublish.Observe(time.Since(e.CreatedAt).Seconds())
		case isRejection(res.Err) && len(events) > 1:
			rejected = append(rejected, e)
		default:
			failures = append(failures, r.failureOf(e, res.Err))
		}
	}

	// The broker judges a whole per-partition batch: one oversized record gets every
	// record that shared its batch rejected. Send each rejected record again on its
	// own, so only the culprit is counted towards the DLQ.
	for _, e := range rejected {
		res := r.produce(ctx, p, r.kafkaRecord(e))[0]
		if res.Err == nil {
			published = append(published, e.ID)
			r.metrics.commitToPublish.Observe(time.Since(e.CreatedAt).Seconds())
			continue
		}
		failures = append(failures, r.failureOf(e, res.Err))
	}
	return published, failures
}

// produce is one bounded publish attempt: a context deadline, backed by
// kgo.RecordDeliveryTimeout, so a broker that never answers cannot hold a worker.
func (r *Relay) produce(ctx context.Context, p producer, records ...*kgo.Record) kgo.ProduceResults {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	return p.ProduceSync(ctx, records...)
}

// kafkaRecord builds the Kafka record of an event. The key is the aggregate id, so one
// aggregate's events share a partition and keep their order for consumers.
func (r *Relay) kafkaRecord(e claimedEvent) *kgo.Record {
	envelope := event.Envelope{ID: e.ID, Type: e.Type, Key: e.AggregateID, OccurredAt: e.CreatedAt, Payload: e.Payload}
	return envelope.Record(r.cfg.Topic, time.Now())
}

// failureOf classifies a failed publish. A rejection is retried per event with
// exponential backoff; a transport failure is retried as soon as the relay's own
// outage pause ends, because the event is not at fault.
func (r *Relay) failureOf(e claimedEvent, err error) failure {
	f := failure{ID: e.ID, Err: err.Error()}
	if isRejection(err) {
		f.Rejected = true
		f.RetryIn = backoff(r.cfg.RetryBase, r.cfg.RetryMax, e.Rejections)
	}
	return f
}
