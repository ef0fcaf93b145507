package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dscourse/payments-outbox/internal/payment"
)

// newHandler is the whole HTTP surface of the service, on one screen.
//
// createHandler replaces POST /payments when not nil (the teaching dual-write mode).
func newHandler(logger *slog.Logger, pool *pgxpool.Pool, reg *prometheus.Registry, relay *relayHandle, createHandler http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Use(newHTTPMetrics(reg).instrument)
	// Unknown paths get the same JSON error shape as every other failure.
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		payment.WriteError(w, r, logger, payment.Errorf(payment.NotFound, "", "no such endpoint: %s %s", r.Method, r.URL.Path))
	})

	r.Get("/healthz", handleHealthz())
	r.Get("/readyz", handleReadyz(logger, pool))
	r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))

	payment.Routes(r, payment.Deps{
		Logger:        logger.With(slog.String("component", "payment")),
		Store:         payment.NewStore(pool),
		Notify:        relay.Notify,
		CreateHandler: createHandler,
	})
	if relay.Admin != nil {
		// The admin handler routes on the full path (/admin/dlq, ...).
		r.Handle("/admin/*", relay.Admin)
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

// handleReadyz says whether the service can take payments: the database answers.
func handleReadyz(logger *slog.Logger, pool *pgxpool.Pool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
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
