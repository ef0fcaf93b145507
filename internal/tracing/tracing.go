// Package tracing follows one payment across the outbox as one trace: the API's
// request, the transaction that writes the payment and its outbox row, the relay's
// publish, the consumer's decision. The W3C traceparent of the transaction is stored
// with the outbox row, the relay continues it and sends its own as a Kafka record
// header, and the consumer continues that.
//
// Tracing is off by default: NewProvider returns a provider that records nothing
// unless the standard OTEL_* variables ask for an OTLP exporter. Nothing here is
// global: the provider is passed to each component, and the propagator is W3C trace
// context, used through OpenTelemetry's own code (no header is parsed by hand).
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// HeaderTraceparent is the W3C trace context header, in HTTP requests and Kafka
// records alike.
const HeaderTraceparent = "traceparent"

// propagator is W3C trace context: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// Enabled says whether the OTEL_* variables ask for traces: OTEL_TRACES_EXPORTER=otlp,
// or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// without OTEL_TRACES_EXPORTER=none. OTEL_SDK_DISABLED=true turns it off.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(getenv("OTEL_TRACES_EXPORTER")) {
	case "otlp":
		return true
	case "none":
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// NewProvider returns the tracer provider of a service and the function that flushes
// and stops it. When Enabled is false it is a no-op provider, which costs nothing.
// Otherwise spans are batched to an OTLP/HTTP exporter, which reads the rest of its
// configuration (endpoint, headers, timeout) from the OTEL_EXPORTER_OTLP_* variables
// itself; OTEL_SERVICE_NAME, when set, overrides service.
func NewProvider(ctx context.Context, service string, getenv func(string) string) (trace.TracerProvider, func(context.Context) error, error) {
	if !Enabled(getenv) {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("new OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service)), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// FlushTimeout bounds the flush of the spans still buffered when a service stops.
const FlushTimeout = 5 * time.Second

// Shutdown flushes and stops a provider with the stop function NewProvider returned,
// within FlushTimeout even when ctx is already cancelled (a service stopping on a
// signal), and logs what it could not send: a service calls it last, after serve, so
// that the spans of its shutdown are flushed too.
func Shutdown(ctx context.Context, stop func(context.Context) error, logger *slog.Logger) {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), FlushTimeout)
	defer cancel()
	if err := stop(stopCtx); err != nil {
		logger.Warn("flush traces", slog.Any("err", err))
	}
}

// OrNone returns tp, or a no-op provider when tp is nil: the default of every config
// field that takes a provider.
func OrNone(tp trace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return noop.NewTracerProvider()
	}
	return tp
}

// Traceparent is the W3C traceparent of the span in ctx, "" when ctx has none (tracing
// off, or a caller that traces nothing).
func Traceparent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	return carrier.Get(HeaderTraceparent)
}

// WithTraceparent returns ctx continuing the trace of traceparent, as a remote parent;
// ctx itself when traceparent is empty or not valid.
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{HeaderTraceparent: traceparent})
}

// InjectRecord sets the record's traceparent header to the span in ctx, replacing any
// it had; it adds nothing when ctx has no span.
func InjectRecord(ctx context.Context, r *kgo.Record) {
	traceparent := Traceparent(ctx)
	if traceparent == "" {
		return
	}
	for i, h := range r.Headers {
		if h.Key == HeaderTraceparent {
			r.Headers[i].Value = []byte(traceparent)
			return
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderTraceparent, Value: []byte(traceparent)})
}

// FromRecord returns ctx continuing the trace of the record's traceparent header, if
// it has one: a record from a producer that traces nothing starts no trace of its own.
func FromRecord(ctx context.Context, r *kgo.Record) context.Context {
	for _, h := range r.Headers {
		if h.Key == HeaderTraceparent {
			return WithTraceparent(ctx, string(h.Value))
		}
	}
	return ctx
}
