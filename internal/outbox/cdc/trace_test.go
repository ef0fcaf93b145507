package cdc

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/internal/tracing"
)

// The CDC relay continues the writer's trace as the polling relay does: its publish is
// a span whose parent is the span stored with the row, and the record carries the
// publish span's traceparent, so that the consumer's decision joins the same trace.
func TestPublishContinuesTheWritersTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b.cfg.TracerProvider = tp

	writerCtx, writer := tp.Tracer("test").Start(context.Background(), "payment create transaction")
	id := uuid.New()
	err := pgx.BeginFunc(writerCtx, b.pool, func(tx pgx.Tx) error {
		return outbox.Insert(writerCtx, tx, outbox.Message{ID: id, Type: "TestEvent", AggregateID: "traced",
			Payload: []byte(`{}`), OccurredAt: time.Now()})
	})
	writer.End()
	if err != nil {
		t.Fatal(err)
	}
	b.start(t)
	b.waitPublished(t, 1, 90*time.Second)

	records := b.consume(t, 1, 60*time.Second)
	if len(records) != 1 {
		t.Fatalf("topic holds %d records, want 1", len(records))
	}
	got := trace.SpanContextFromContext(tracing.FromRecord(context.Background(), records[0]))
	if !got.IsValid() || got.TraceID() != writer.SpanContext().TraceID() {
		t.Fatalf("record's traceparent is in trace %v, want the writer's %v", got.TraceID(), writer.SpanContext().TraceID())
	}
	var publish *tracetest.SpanStub
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		for _, s := range spans.GetSpans() {
			if s.Name == "outbox publish" {
				publish = &s
				return true, ""
			}
		}
		return false, "no span named outbox publish"
	})
	if publish.Parent.SpanID() != writer.SpanContext().SpanID() {
		t.Errorf("publish span's parent is %v, want the writer's span %v", publish.Parent.SpanID(), writer.SpanContext().SpanID())
	}
	if publish.SpanContext.SpanID() != got.SpanID() {
		t.Errorf("record's traceparent names span %v, want the publish span %v", got.SpanID(), publish.SpanContext.SpanID())
	}
}
