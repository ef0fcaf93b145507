package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/antifraud"
	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
	"github.com/dscourse/payments-outbox/internal/payment"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/internal/tracing"
	"github.com/dscourse/payments-outbox/migrations"
)

// traceBundle is the whole path of a payment, in this process but over a real
// PostgreSQL and a real Kafka: the API's handler behind the tracing middleware, the
// relay and the consumer, all recording into one in-memory exporter.
type traceBundle struct {
	ctx      context.Context
	api      *httptest.Server
	payments *pgxpool.Pool
	relay    *poll.Relay
	brokers  []string
	topic    string
	spans    *tracetest.InMemoryExporter
}

func setup(t *testing.T) traceBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	b := traceBundle{
		ctx: ctx, brokers: testenv.KafkaBrokers(t), topic: testenv.NewTopic(t, 3),
		payments: testenv.NewPool(t, migrations.Payments),
		spans:    tracetest.NewInMemoryExporter(),
	}
	// A syncer, not a batcher: every span is in the exporter the moment it ends.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(b.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) })

	outboxMetrics, err := poll.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	b.relay, err = poll.NewRelay(b.payments, poll.Config{
		Brokers: b.brokers, Topic: b.topic, TracerProvider: tp, PollInterval: 100 * time.Millisecond,
	}, logger, outboxMetrics)
	if err != nil {
		t.Fatal(err)
	}
	fraudMetrics, err := antifraud.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := antifraud.NewConsumer(testenv.NewPool(t, migrations.Antifraud), antifraud.Config{
		Brokers: b.brokers, Topic: b.topic, Group: "trace-" + b.topic, TracerProvider: tp,
		ClientOpts: []kgo.Opt{kgo.FetchMaxWait(100 * time.Millisecond)},
	}, logger, fraudMetrics)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- b.relay.Run(runCtx) }()
	go func() { done <- consumer.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("stop: %v", err)
			}
		}
	})

	r := chi.NewRouter()
	r.Use(tracing.Middleware(tp, func(r *http.Request) string { return chi.RouteContext(r.Context()).RoutePattern() }))
	create := payment.HandleCreate(logger, payment.NewTracedStore(b.payments, tp), b.relay.Notify)
	r.Method(http.MethodPost, "/payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		create.ServeHTTP(w, r.WithContext(merchant.WithID(r.Context(), merchant.DefaultID)))
	}))
	b.api = httptest.NewServer(r)
	t.Cleanup(b.api.Close)
	return b
}

// pay posts one payment and checks it was accepted.
func (b traceBundle) pay(t *testing.T) {
	t.Helper()
	resp, err := http.Post(b.api.URL+"/payments", "application/json", strings.NewReader(`{"user_id":"u-42","amount":1999,"currency":"EUR"}`))
	if err != nil {
		t.Fatalf("POST /payments: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /payments: status %d, want 201", resp.StatusCode)
	}
}

// waitForSpans waits until the exporter holds n spans named name.
func (b traceBundle) waitForSpans(t *testing.T, name string, n int) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, func() (bool, string) {
		got := len(named(b.spans.GetSpans(), name))
		return got >= n, fmt.Sprintf("%d %q spans, want %d", got, name, n)
	})
}

// named returns the spans called name, in the order they started.
func named(spans tracetest.SpanStubs, name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	return out
}

func duplicate(s tracetest.SpanStub) bool {
	for _, a := range s.Attributes {
		if a.Key == "antifraud.duplicate" {
			return a.Value.AsBool()
		}
	}
	return false
}

// A span as the test reads it: its name, and the name of its parent in the trace.
type link struct{ Name, Parent string }

// links lists every span with its parent's name, in the order the spans started (the
// order they ended depends on the scheduler: a publish span ends after its ack, which
// may come after the consumer read the record), and fails the test if the spans are
// not all of one trace.
func links(t *testing.T, spans tracetest.SpanStubs) []link {
	t.Helper()
	spans = slices.Clone(spans)
	slices.SortStableFunc(spans, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	names := map[trace.SpanID]string{}
	for _, s := range spans {
		names[s.SpanContext.SpanID()] = s.Name
	}
	var out []link
	for _, s := range spans {
		if s.SpanContext.TraceID() != spans[0].SpanContext.TraceID() {
			t.Errorf("span %q is in trace %s, the request's is %s", s.Name, s.SpanContext.TraceID(), spans[0].SpanContext.TraceID())
		}
		parent := "(root)"
		if s.Parent.IsValid() {
			parent = names[s.Parent.SpanID()]
			if parent == "" {
				parent = "(unknown span " + s.Parent.SpanID().String() + ")"
			}
		}
		out = append(out, link{Name: s.Name, Parent: parent})
	}
	return out
}

// One payment is one trace across the outbox and a real Kafka: the request, its
// transaction, the relay's publish (continued from the traceparent stored with the
// outbox row), the consumer's decision (continued from the record's traceparent
// header), each the child of the one before.
func TestOnePaymentIsOneTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.pay(t)
	b.waitForSpans(t, "antifraud decide", 1)

	spans := b.spans.GetSpans()
	want := []link{
		{"POST /payments", "(root)"},
		{"payment create transaction", "POST /payments"},
		{"outbox publish", "payment create transaction"},
		{"antifraud decide", "outbox publish"},
	}
	if diff := cmp.Diff(want, links(t, spans)); diff != "" {
		t.Errorf("spans and their parents (-want +got):\n%s", diff)
	}
	if d := named(spans, "antifraud decide"); len(d) == 1 && duplicate(d[0]) {
		t.Errorf("the first delivery is marked as a duplicate")
	}
}

// A republished event (its ack lost, say, so the relay publishes it again) is a second
// publish span in the same trace, and its second delivery a decision span marked as a
// duplicate.
func TestARepublishIsASecondPublishInTheSameTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.pay(t)
	b.waitForSpans(t, "antifraud decide", 1)

	// What the relay does after a lost ack: the row is pending again, and published
	// again. The database cannot lose the ack, so the test hands the row back.
	tag, err := b.payments.Exec(b.ctx, `
		WITH back AS (DELETE FROM outbox_published RETURNING *)
		INSERT INTO outbox_events (id, seq, event_type, aggregate_id, payload, created_at, traceparent)
		OVERRIDING SYSTEM VALUE
		SELECT id, seq, event_type, aggregate_id, payload, created_at, traceparent FROM back`)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("hand the event back to the relay: %v (%d rows)", err, tag.RowsAffected())
	}
	b.relay.Notify()
	b.waitForSpans(t, "antifraud decide", 2)

	spans := b.spans.GetSpans()
	want := []link{
		{"POST /payments", "(root)"},
		{"payment create transaction", "POST /payments"},
		{"outbox publish", "payment create transaction"},
		{"antifraud decide", "outbox publish"},
		{"outbox publish", "payment create transaction"},
		{"antifraud decide", "outbox publish"},
	}
	if diff := cmp.Diff(want, links(t, spans)); diff != "" {
		t.Errorf("spans and their parents (-want +got):\n%s", diff)
	}
	decisions := named(spans, "antifraud decide")
	if got := []bool{duplicate(decisions[0]), duplicate(decisions[1])}; !cmp.Equal(got, []bool{false, true}) {
		t.Errorf("decision spans marked duplicate: %v, want [false true]", got)
	}
	publishes := named(spans, "outbox publish")
	if decisions[1].Parent.SpanID() != publishes[1].SpanContext.SpanID() {
		t.Errorf("the duplicate's decision continues publish %s, want the second publish %s", decisions[1].Parent.SpanID(), publishes[1].SpanContext.SpanID())
	}
}

// With tracing off, nothing is stored and no header is sent: the record is exactly
// what the contract asks for, and a consumer of the record starts no trace.
func TestNoTraceparentWithoutTracing(t *testing.T) {
	t.Parallel()
	if got := tracing.Traceparent(context.Background()); got != "" {
		t.Errorf("Traceparent of a context without a span = %q, want empty", got)
	}
	r := &kgo.Record{}
	tracing.InjectRecord(context.Background(), r)
	if len(r.Headers) != 0 {
		t.Errorf("InjectRecord without a span added headers %v", r.Headers)
	}
	if ctx := tracing.FromRecord(context.Background(), r); trace.SpanContextFromContext(ctx).IsValid() {
		t.Errorf("FromRecord of a record without traceparent made a span context")
	}
}

func TestEnabled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, false},
	}
	for _, tt := range tests {
		getenv := func(k string) string { return tt.env[k] }
		if got := tracing.Enabled(getenv); got != tt.want {
			t.Errorf("Enabled(%v) = %t, want %t", tt.env, got, tt.want)
		}
	}
}
