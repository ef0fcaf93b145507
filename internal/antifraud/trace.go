package antifraud

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/tracing"
)

// traceDecisions records, once a batch has committed, one consumer span per record
// that carries a traceparent header, as a child of the publish that wrote it: the
// last span of the payment's trace. A delivery of an event already processed (a copy,
// in this batch or an earlier one) is marked antifraud.duplicate, so the trace shows
// the redelivery and that it changed nothing. fresh is processBatch's set of event ids
// seen for the first time. The spans start when the batch did: their work is the
// batch's one transaction.
func (c *Consumer) traceDecisions(ctx context.Context, started time.Time, records []*kgo.Record, fresh map[uuid.UUID]bool) {
	tracer := c.cfg.TracerProvider.Tracer("github.com/dscourse/payments-outbox/internal/antifraud")
	decided := map[uuid.UUID]bool{} // event ids whose first delivery in this batch has its span
	for _, r := range records {
		parent := tracing.FromRecord(ctx, r)
		if !trace.SpanContextFromContext(parent).IsValid() {
			continue // a producer that traces nothing
		}
		env, bad := event.FromRecord(r)
		attrs := []attribute.KeyValue{
			semconv.MessagingSystemKafka,
			semconv.MessagingDestinationName(r.Topic),
			attribute.Int64("messaging.kafka.offset", r.Offset),
		}
		if bad == nil {
			duplicate := !fresh[env.ID] || decided[env.ID]
			decided[env.ID] = true
			attrs = append(attrs, attribute.String("outbox.event_id", env.ID.String()), attribute.Bool("antifraud.duplicate", duplicate))
		} else {
			attrs = append(attrs, attribute.Bool("antifraud.dead_lettered", true))
		}
		_, span := tracer.Start(parent, "antifraud decide", trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithTimestamp(started), trace.WithAttributes(attrs...))
		span.End()
	}
}
