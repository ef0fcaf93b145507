package delivery

import (
	"context"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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

// PublishSpans are the open spans of one publish attempt, by record.
type PublishSpans map[*kgo.Record]trace.Span

// Start opens the span of rec (StartPublishSpan) and keeps it, if the writer traced the
// event.
func (s PublishSpans) Start(tracer trace.Tracer, topic string, rec *kgo.Record, id uuid.UUID, traceparent string, attrs ...attribute.KeyValue) {
	if span := StartPublishSpan(tracer, topic, rec, id, traceparent, attrs...); span != nil {
		s[rec] = span
	}
}

// End closes the span of rec with the outcome of its attempt: err nil is acknowledged,
// any other error is recorded on the span.
func (s PublishSpans) End(rec *kgo.Record, err error) {
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
