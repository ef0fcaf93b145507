package delivery

import (
	"context"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/tracing"
)

// TracerName names the tracer of both relays' publish spans.
const TracerName = "github.com/dscourse/payments-outbox/internal/outbox"

// StartPublishSpan opens the producer span of one publish attempt of rec, the record of
// event id, as a child of the writer's span (traceparent, stored with the row), and puts
// the span's own traceparent in the record's headers, so that the consumer continues
// from this publish (docs/tracing.md). Each attempt is a span: an event published again
// after a lost ack shows as a second publish in the same trace. It returns nil, and
// leaves rec alone, when the writer traced nothing.
func StartPublishSpan(tracer trace.Tracer, topic string, rec *kgo.Record, id uuid.UUID, traceparent string, attrs ...attribute.KeyValue) trace.Span {
	if traceparent == "" {
		return nil
	}
	// The writer's request is over: its context is only a parent for the trace.
	ctx := tracing.WithTraceparent(context.Background(), traceparent)
	ctx, span := tracer.Start(ctx, "outbox publish", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(append([]attribute.KeyValue{
			semconv.MessagingSystemKafka,
			semconv.MessagingDestinationName(topic),
			attribute.String("outbox.event_id", id.String()),
		}, attrs...)...))
	tracing.InjectRecord(ctx, rec)
	return span
}
