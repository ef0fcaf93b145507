package cdc

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// tracedKey is the key under which a record's Context carries the event it was built
// from, when the event's writer traced it: send opens the publish span from it.
type tracedKey struct{}

// withTraced is the Context of the record of a traced event e.
func withTraced(e outboxEvent) context.Context {
	return context.WithValue(context.Background(), tracedKey{}, e)
}

// startPublishSpans opens a producer span for each record whose event's writer traced
// it, as a child of the writer's span, and puts the span's traceparent in the record's
// headers (delivery.StartPublishSpan): the polling relay's spans, so that a trace reads
// the same in both modes.
func (r *Relay) startPublishSpans(records []*kgo.Record) delivery.PublishSpans {
	tracer := r.cfg.TracerProvider.Tracer(delivery.TracerName)
	spans := delivery.PublishSpans{}
	for _, rec := range records {
		if rec.Context == nil {
			continue
		}
		if e, ok := rec.Context.Value(tracedKey{}).(outboxEvent); ok {
			spans.Start(tracer, r.cfg.Topic, rec, e.ID, e.Traceparent)
		}
	}
	return spans
}
