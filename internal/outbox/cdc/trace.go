package cdc

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// tracedKey is the key under which a record's Context carries the event it was built
// from, when the event's writer traced it: send opens the publish span from it.
type tracedKey struct{}

// withTraced is the Context of the record of a traced event e.
func withTraced(e outboxEvent) context.Context {
	return context.WithValue(context.Background(), tracedKey{}, e)
}

// publishSpans are the open spans of one send, by record.
type publishSpans map[*kgo.Record]trace.Span

// startPublishSpans opens a producer span for each record whose event's writer traced
// it, as a child of the writer's span, and puts the span's traceparent in the record's
// headers (delivery.StartPublishSpan): the polling relay's spans, so that a trace reads
// the same in both modes.
func (r *Relay) startPublishSpans(records []*kgo.Record) publishSpans {
	var spans publishSpans
	for _, rec := range records {
		if rec.Context == nil {
			continue
		}
		e, ok := rec.Context.Value(tracedKey{}).(outboxEvent)
		if !ok {
			continue
		}
		if spans == nil {
			spans = publishSpans{}
		}
		tracer := r.cfg.TracerProvider.Tracer(delivery.TracerName)
		spans[rec] = delivery.StartPublishSpan(tracer, r.cfg.Topic, rec, e.ID, e.Traceparent)
	}
	return spans
}

// end closes the span of rec with the outcome of its attempt: err nil is acknowledged.
func (s publishSpans) end(rec *kgo.Record, err error) {
	span, ok := s[rec]
	if !ok {
		return
	}
	delete(s, rec)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "publish failed")
	}
	span.End()
}
