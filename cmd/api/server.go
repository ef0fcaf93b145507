package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/dualwrite"
	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/payment"
	"github.com/dscourse/payments-outbox/internal/pgprimary"
	"github.com/dscourse/payments-outbox/internal/tracing"
	"github.com/dscourse/payments-outbox/migrations"
)

// startupTimeout bounds connecting to the database and migrating it.
const startupTimeout = 30 * time.Second

// The stop budget: the bound of each stage of serve's shutdown (below), in the order
// they run, and their sum. A Kubernetes pod gets 30 s between SIGTERM and SIGKILL by
// default; the whole stop fits in stopBudget, so that it is never cut off by the
// SIGKILL. config.Validate refuses a RELAY_SHUTDOWN_TIMEOUT that breaks it.
const (
	stopBudget = 25 * time.Second
	// stopHTTP: the HTTP servers stop accepting, the requests in flight finish (a
	// request's transaction is bounded by 5 s, payment.transactionTimeout).
	stopHTTP = 6 * time.Second
	// stopRelayBatches: the relay's batches in flight finish (RELAY_SHUTDOWN_TIMEOUT).
	stopRelayBatches = 5 * time.Second
	// stopRelayQuery: an abandoned batch commits what Kafka acknowledged, which hands
	// its other rows (its lease) back to the other relays (poll.Config.QueryTimeout).
	stopRelayQuery = 5 * time.Second
	// stopRelayAlert: the dead-letter alerts of the last batch (poll.Config.AlertTimeout).
	stopRelayAlert = 2 * time.Second
	// stopClose: the Kafka clients, the cleaner and the pool close; no timer, the
	// margin for work that is already over.
	stopClose = 2 * time.Second
	// stopTraceFlush: run flushes the spans of the shutdown, last.
	stopTraceFlush = tracing.FlushTimeout
)

// stopTotal is the worst-case stop with c's relay settings; Validate keeps it within
// stopBudget.
func (c config) stopTotal() time.Duration {
	return stopHTTP + c.Relay.ShutdownTimeout + c.Relay.QueryTimeout + c.Relay.AlertTimeout + stopClose + stopTraceFlush
}

// maxHeaderBytes bounds a request's headers: an API key, a traceparent and an
// Idempotency-Key need well under 1 KiB, and the default (1 MiB) lets each connection
// make the server buffer a megabyte. Larger headers get 431.
const maxHeaderBytes = 16 << 10

// serve runs the API, the outbox relay and its cleaner until ctx ends. Shutdown has one
// shape, each step starting when the previous one is over:
//
//  1. ctx (the signal context) ends: the HTTP servers (the API's and the admin
//     listener's) stop accepting and give the requests in flight up to stopHTTP to
//     finish. The relay keeps running
//     meanwhile, so the events those requests commit are published at once.
//  2. The relay's context is cancelled: the relay claims no new batch, finishes or
//     abandons its batch in flight within poll.Config.ShutdownTimeout
//     (RELAY_SHUTDOWN_TIMEOUT; see poll.Relay.Run, which owns that bound) and closes
//     its Kafka client; the cleaners (outbox rows, Idempotency-Keys) stop between two
//     deletes.
//  3. The dual-write handler's Kafka client (DUAL_WRITE=true only) closes, then the
//     pool, which every step above used.
//
// The relay failing to start takes the same path from step 1, and serve returns its
// error: the process exits rather than staying up unready. Run fails only when it
// cannot build its Kafka client from the configuration (a broker port that is not a
// number, say), which no amount of waiting cures. An API without its relay would
// commit payments that nothing publishes, and a process left up "not ready" is seen
// only by whoever reads its probe; an exit with the cause on stderr is what a
// supervisor (systemd, Kubernetes) restarts, counts and reports as a crash loop.
// Until the listener closes, /readyz answers 503 so that no new traffic is sent.
func serve(ctx context.Context, cfg config, logger *slog.Logger, tp trace.TracerProvider) error {
	// A refused password or certificate stops the start; a broker that is down does not.
	if err := cfg.Kafka.CheckAtStart(ctx, cfg.Relay.Brokers, cfg.Relay.ClientOpts, logger); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	if err := registerProcessMetrics(reg); err != nil {
		return err
	}
	primary, err := pgprimary.NewWatcher(logger, reg)
	if err != nil {
		return err
	}
	pool, err := openPool(ctx, cfg, primary)
	if err != nil {
		return err
	}
	defer pool.Close()

	cfg.Relay.TracerProvider = tp
	logUnsignedAlerts(cfg, logger)
	relay, nudges, err := newRelay(cfg, pool, logger, reg)
	if err != nil {
		return err
	}
	if cfg.RelayMode != relayModeCDC {
		dropCDCSlot(ctx, cfg, pool, logger)
	}
	cleaner, err := outbox.NewCleaner(pool, cfg.Cleaner, logger, reg)
	if err != nil {
		return fmt.Errorf("new cleaner: %w", err)
	}
	keyCleaner, err := payment.NewKeyCleaner(pool, cfg.Keys, logger)
	if err != nil {
		return fmt.Errorf("new idempotency key cleaner: %w", err)
	}
	var dualWrite *dualwrite.Handler
	if cfg.DualWrite {
		// TEACHING ONLY: dualwrite.NewHandler logs the warning that says so.
		dualWrite, err = dualwrite.NewHandler(dualwrite.Config{Brokers: cfg.Relay.Brokers, Topic: cfg.Relay.Topic, ClientOpts: cfg.Relay.ClientOpts}, pool, logger)
		if err != nil {
			return fmt.Errorf("new dual-write handler: %w", err)
		}
		// Deferred after the pool's Close, so it runs before it.
		defer dualWrite.Close()
	}
	relayStopped := make(chan struct{}) // closed when relay.Run returns; /readyz reads it
	httpMetrics, err := newHTTPMetrics(reg)
	if err != nil {
		return err
	}
	handler := newHandler(cfg, logger, pool, httpMetrics, tp, nudges, relayStopped, dualWrite)
	admin := newAdminHandler(cfg, logger, pool, reg, httpMetrics, nudges)

	srv, adminSrv := newServer(handler, logger), newServer(admin, logger)
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	adminLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen on ADMIN_ADDR %s: %w", cfg.AdminAddr, err)
	}
	// Tests and the benchmark read the bound addresses from these lines (port 0).
	logger.Info("listening", slog.String("addr", ln.Addr().String()))
	logger.Info("admin listening", slog.String("addr", adminLn.Addr().String()))

	// Not derived from ctx's cancellation: the relay must outlive the HTTP server (step 2
	// above), so stopBackground is what ends it.
	backgroundCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	var background sync.WaitGroup
	relayErr := make(chan error, 1)
	background.Go(func() {
		err := relay.Run(backgroundCtx)
		close(relayStopped) // first, so that readiness fails before the shutdown starts
		relayErr <- err
	})
	background.Go(func() { cleaner.Run(backgroundCtx) })
	background.Go(func() { keyCleaner.Run(backgroundCtx) })

	serveErr, adminErr := make(chan error, 1), make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	go func() { adminErr <- adminSrv.Serve(adminLn) }()

	var errs []error
	select {
	case err := <-serveErr:
		// The server stopped without being asked: shut the rest down and say why.
		errs = append(errs, fmt.Errorf("serve http: %w", err), shutdownHTTP(ctx, adminSrv, adminErr))
	case err := <-adminErr:
		errs = append(errs, fmt.Errorf("serve admin http: %w", err), shutdownHTTP(ctx, srv, serveErr))
	case err := <-relayErr:
		// Before stopBackground, Run returns only when it cannot start (see above).
		errs = append(errs, fmt.Errorf("outbox relay: %w", err), shutdownBoth(ctx, srv, serveErr, adminSrv, adminErr))
	case <-ctx.Done():
		logger.Info("shutting down")
		errs = append(errs, shutdownBoth(ctx, srv, serveErr, adminSrv, adminErr))
	}
	stopBackground()
	background.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}

// newServer is an http.Server for handler with the bounds every listener needs.
func newServer(handler http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler: handler,
		// Slow or stuck clients must not hold connections and goroutines forever.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// shutdownBoth stops the API's and the admin listener's servers side by side, within
// one stopHTTP.
func shutdownBoth(ctx context.Context, srv *http.Server, serveErr <-chan error, admin *http.Server, adminErr <-chan error) error {
	done := make(chan error, 1)
	go func() { done <- shutdownHTTP(ctx, admin, adminErr) }()
	err := shutdownHTTP(ctx, srv, serveErr)
	return errors.Join(err, <-done)
}

// shutdownHTTP stops srv within stopHTTP, even though ctx has ended, and waits for its
// Serve to return.
func shutdownHTTP(ctx context.Context, srv *http.Server, serveErr <-chan error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopHTTP)
	defer cancel()
	var errs []error
	if err := srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("shut down http server: %w", err))
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("serve http: %w", err))
	}
	return errors.Join(errs...)
}

// registerProcessMetrics adds the Go runtime's and the process's metrics to reg.
func registerProcessMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register process metrics: %w", err)
		}
	}
	return nil
}

// openPool connects to the payments database and migrates it. primary hears of every
// new connection: with a multi-host DATABASE_URL, the pool follows the primary through
// a failover, and primary says when it did.
func openPool(ctx context.Context, cfg config, primary *pgprimary.Watcher) (*pgxpool.Pool, error) {
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		// The parse error may contain the password; say only what to fix.
		return nil, errors.New("DATABASE_URL does not parse: use postgres://user@host:port/dbname?sslmode=disable")
	}
	poolCfg.MaxConns = int32(cfg.DatabaseMaxConns) // Validate keeps it within int32
	poolCfg.AfterConnect = primary.AfterConnect
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to the payments database: %w", err)
	}
	if err := migrations.Payments.UpPool(ctx, pool); err != nil {
		pool.Close()
		return nil, err // already says "migrations payments: ..."
	}
	return pool, nil
}
