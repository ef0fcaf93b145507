package tracing_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/tracing"
)

// callerTraceparent is a sampled traceparent a client could send.
const (
	callerTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID      = "00f067aa0ba902b7"
	callerTraceparent = "00-" + callerTraceID + "-" + callerSpanID + "-01"
)

// serveTraced sends one request with traceparent through the middleware on a provider
// with sampler, and returns the spans it recorded.
func serveTraced(t *testing.T, sampler sdktrace.Sampler, traceparent string) tracetest.SpanStubs {
	t.Helper()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithSampler(sampler))
	h := tracing.Middleware(tp, func(*http.Request) string { return "/payments" })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	req := httptest.NewRequest(http.MethodPost, "/payments", nil)
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	h.ServeHTTP(httptest.NewRecorder(), req)
	return spans.GetSpans()
}

// TestMiddlewareLinksTheCallersTrace: a request's traceparent does not become the
// parent of the server span: the span starts a trace of ours and links the caller's.
func TestMiddlewareLinksTheCallersTrace(t *testing.T) {
	t.Parallel()
	spans := serveTraced(t, sdktrace.AlwaysSample(), callerTraceparent)
	if len(spans) != 1 {
		t.Fatalf("recorded %d spans, want 1", len(spans))
	}
	s := spans[0]
	if got := s.SpanContext.TraceID().String(); got == callerTraceID {
		t.Errorf("server span is in the caller's trace %s, want a new trace", got)
	}
	if s.Parent.IsValid() {
		t.Errorf("server span has parent %s, want none (a root)", s.Parent.SpanID())
	}
	if len(s.Links) != 1 {
		t.Fatalf("server span has %d links, want 1 to the caller's span", len(s.Links))
	}
	got := s.Links[0].SpanContext
	if got.TraceID().String() != callerTraceID || got.SpanID().String() != callerSpanID {
		t.Errorf("link to %s/%s, want %s/%s", got.TraceID(), got.SpanID(), callerTraceID, callerSpanID)
	}
}

// TestMiddlewareIgnoresTheCallersSampledFlag: with a parent-based sampler that samples
// nothing of ours, a caller's sampled flag must not make us record (and export) a trace.
func TestMiddlewareIgnoresTheCallersSampledFlag(t *testing.T) {
	t.Parallel()
	if spans := serveTraced(t, sdktrace.ParentBased(sdktrace.NeverSample()), callerTraceparent); len(spans) != 0 {
		t.Errorf("recorded %d spans for a caller's sampled traceparent, want 0 (our sampler says never)", len(spans))
	}
}

// TestMiddlewareWithoutTraceparent: no header, no link, a root span.
func TestMiddlewareWithoutTraceparent(t *testing.T) {
	t.Parallel()
	spans := serveTraced(t, sdktrace.AlwaysSample(), "")
	if len(spans) != 1 || spans[0].Parent.IsValid() || len(spans[0].Links) != 0 {
		t.Fatalf("spans %+v, want one root span without links", spans)
	}
	if spans[0].SpanKind != trace.SpanKindServer {
		t.Errorf("span kind %v, want server", spans[0].SpanKind)
	}
}
