package tracing

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Middleware opens a server span for each request. The span is the root of a new
// trace even when the request carries a traceparent header: a caller on the internet
// must not choose our trace ids, nor force sampling with its flags (the sampler follows
// a remote parent's sampled flag). The caller's context is kept as a link, so a
// collector still joins the two traces. The span is named after the route that
// route returns (POST /payments, GET /payments/{id}, not the path with its ids); a
// router knows it only once it has routed, so route is called at the end, and "" keeps
// the method alone. route is the router's, so that this package, which the consumer
// links too, links no router. A 5xx marks the span as failed.
func Middleware(tp trace.TracerProvider, route func(*http.Request) string) func(http.Handler) http.Handler {
	tracer := OrNone(tp).Tracer("github.com/dscourse/payments-outbox/internal/tracing")
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path))}
			caller := trace.SpanContextFromContext(propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
			if caller.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller}))
			}
			ctx, span := tracer.Start(r.Context(), r.Method, opts...)
			defer span.End()
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			r = r.WithContext(ctx)
			next.ServeHTTP(sw, r)
			if pattern := route(r); pattern != "" {
				span.SetName(r.Method + " " + pattern)
				span.SetAttributes(semconv.HTTPRoute(pattern))
			}
			span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
			if sw.status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(sw.status))
			}
		})
	}
}

// statusWriter remembers the status code a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
