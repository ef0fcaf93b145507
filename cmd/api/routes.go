package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/dualwrite"
	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/payment"
	"github.com/dscourse/payments-outbox/internal/tracing"
)

// newHandler and newAdminHandler are the whole HTTP surface of the service, on one
// screen: every endpoint is listed here and nowhere else. newHandler is the public
// API on HTTP_ADDR. relay says whom to nudge after a payment and after a DLQ replay
// (relaymode.go); relayStopped is closed once the relay is no longer running.
// dualWrite is nil unless cfg.DualWrite.
func newHandler(cfg config, logger *slog.Logger, pool *pgxpool.Pool, metrics *httpMetrics, tp trace.TracerProvider,
	relay relayNudges, relayStopped <-chan struct{}, dualWrite *dualwrite.Handler) http.Handler {
	r := chi.NewRouter()
	r.Use(metrics.instrument)
	// A span per request (off unless OTEL_* asks): the first of a payment's trace.
	r.Use(tracing.Middleware(tp, chiRoute))
	// Unknown paths get the same JSON error shape as every other failure.
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		payment.WriteError(w, r, logger, payment.Errorf(payment.NotFound, "", "no such endpoint: %s %s", r.Method, r.URL.Path))
	})

	r.Get("/healthz", handleHealthz())
	r.Get("/readyz", handleReadyz(logger, pool, relayStopped))

	paymentLogger := logger.With(slog.String("component", "payment"))
	payments := payment.NewTracedStore(pool, tp)
	r.Group(func(r chi.Router) {
		// Every payment route acts for the merchant of the request's API key; the
		// handlers scope each query by it, so another merchant's payment is a 404.
		r.Use(merchant.RequireAPIKey(merchant.NewKeyCache(merchant.NewStore(pool), cfg.KeyCache), unauthorized(paymentLogger), keyLookupFailed(paymentLogger)))
		if cfg.DualWrite {
			// TEACHING ONLY: commits the payment without an outbox row and publishes from
			// the request, the one path to Kafka outside the outbox (docs/anti-pattern.md).
			r.Method(http.MethodPost, "/payments", dualWrite)
		} else {
			// The payment and its event in one transaction; the relay publishes it.
			r.Method(http.MethodPost, "/payments", payment.HandleCreate(paymentLogger, payments, relay.created))
		}
		r.Method(http.MethodGet, "/payments/{id}", payment.HandleGet(paymentLogger, payments))
		// The lifecycle (docs/adr/0006): each transition and its event in one transaction.
		for _, action := range []string{payment.ActionCapture, payment.ActionRefund, payment.ActionCancel} {
			r.Method(http.MethodPost, "/payments/{id}/"+action, payment.HandleTransition(paymentLogger, payments, action, relay.created))
		}
	})
	return r
}

// unauthorized answers a request without a live API key: 401 in the error shape of
// every other failure.
func unauthorized(logger *slog.Logger) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		payment.WriteError(w, r, logger, payment.Errorf(payment.Unauthorized, "Authorization",
			"a valid API key is required: send Authorization: Bearer <key> (api keys create --merchant NAME makes one)"))
	}
}

// keyLookupFailed answers a request whose key could not be checked: the database is
// down, as for any other query, so 503 with Retry-After.
func keyLookupFailed(logger *slog.Logger) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		unavailable := payment.Errorf(payment.Unavailable, "", "cannot check the API key right now")
		payment.WriteError(w, r, logger, fmt.Errorf("%w: %w", unavailable, err))
	}
}

// newAdminHandler is the operators' surface on ADMIN_ADDR: /metrics for the scraper,
// the relay's dead-letter endpoints and the runtime's profiles. Apart from the public API, so that neither is
// reachable from where the payments are.
func newAdminHandler(cfg config, logger *slog.Logger, pool *pgxpool.Pool, reg *prometheus.Registry, metrics *httpMetrics,
	relay relayNudges) http.Handler {
	r := chi.NewRouter()
	r.Use(metrics.instrument)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		payment.WriteError(w, r, logger, payment.Errorf(payment.NotFound, "", "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))

	// Without a token the admin endpoints do not exist (404): an unprotected replay
	// button is worse than none.
	if cfg.AdminToken != "" {
		dlq := outbox.NewDLQ(pool, logger.With(slog.String("component", "outbox_admin")))
		r.Group(func(r chi.Router) {
			r.Use(outbox.RequireBearerToken(cfg.AdminToken))
			r.Method(http.MethodGet, "/admin/dlq", dlq.HandleList())
			r.Method(http.MethodPost, "/admin/dlq/{event_id}/replay", dlq.HandleReplay(relay.replayed))
			// The Go runtime's profiles (net/http/pprof), for an operator asking where a
			// busy process spends its CPU; the API benchmark's -cpuprofile reads them. At
			// most 15 s each: the admin server's WriteTimeout.
			r.Mount("/debug", middleware.Profiler())
		})
	}
	return r
}

// handleHealthz says the process is alive and serving; it checks nothing else, so
// that a database outage does not get the process restarted.
func handleHealthz() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	}
}

// readyTimeout bounds the readiness probe's database ping.
const readyTimeout = 2 * time.Second

// handleReadyz says whether the service can take payments: its relay runs, so what it
// commits gets published, and the database answers.
func handleReadyz(logger *slog.Logger, pool *pgxpool.Pool, relayStopped <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-relayStopped:
			// Only between a failed relay start and the process's exit (serve).
			payment.WriteError(w, r, logger, payment.Errorf(payment.Unavailable, "", "the outbox relay is not running"))
			return
		default:
		}
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			// Expected while the database restarts: answered like any request that finds
			// the database down (503, Retry-After, a warning with the cause in the log).
			unavailable := payment.Errorf(payment.Unavailable, "", "the payments database is unreachable")
			payment.WriteError(w, r, logger, fmt.Errorf("%w: %w", unavailable, err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ready"}` + "\n"))
	}
}

// chiRoute is the pattern chi matched for r, e.g. /payments/{id}: the name of the
// request's span, which must not carry the ids.
func chiRoute(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}
