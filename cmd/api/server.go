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
	"github.com/dscourse/payments-outbox/migrations"
)

const (
	// httpShutdownTimeout bounds how long in-flight requests may take to finish at stop.
	httpShutdownTimeout = 15 * time.Second
	// startupTimeout bounds connecting to the database and migrating it.
	startupTimeout = 30 * time.Second
)

// serve runs the API, the outbox relay and its cleaner until ctx ends. Shutdown has one
// shape, each step starting when the previous one is over:
//
//  1. ctx (the signal context) ends: the HTTP server stops accepting and gives the
//     requests in flight up to httpShutdownTimeout to finish. The relay keeps running
//     meanwhile, so the events those requests commit are published at once.
//  2. The relay's context is cancelled: the relay claims no new batch, finishes or
//     abandons its batch in flight within RelayConfig.ShutdownTimeout
//     (RELAY_SHUTDOWN_TIMEOUT; see poll.Relay.Run, which owns that bound) and closes
//     its Kafka client; the cleaner stops between two deletes.
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
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	reg := prometheus.NewRegistry()
	if err := registerProcessMetrics(reg); err != nil {
		return err
	}
	cfg.Relay.TracerProvider = tp
	relay, nudges, err := newRelay(cfg, pool, logger, reg)
	if err != nil {
		return err
	}
	cleaner, err := outbox.NewCleaner(pool, cfg.Cleaner, logger, reg)
	if err != nil {
		return fmt.Errorf("new cleaner: %w", err)
	}
	var dualWrite *dualwrite.Handler
	if cfg.DualWrite {
		// TEACHING ONLY: dualwrite.NewHandler logs the warning that says so.
		dualWrite, err = dualwrite.NewHandler(dualwrite.Config{Brokers: cfg.Relay.Brokers, Topic: cfg.Relay.Topic}, pool, logger)
		if err != nil {
			return fmt.Errorf("new dual-write handler: %w", err)
		}
		// Deferred after the pool's Close, so it runs before it.
		defer dualWrite.Close()
	}
	relayStopped := make(chan struct{}) // closed when relay.Run returns; /readyz reads it
	handler, err := newHandler(cfg, logger, pool, reg, tp, nudges, relayStopped, dualWrite)
	if err != nil {
		return err
	}

	srv := &http.Server{
		Handler: handler,
		// Slow or stuck clients must not hold connections and goroutines forever.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	// Tests and the benchmark read the bound address from this line (HTTP_ADDR port 0).
	logger.Info("listening", slog.String("addr", ln.Addr().String()))

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

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	var errs []error
	select {
	case err := <-serveErr:
		// The server stopped without being asked: shut the rest down and say why.
		errs = append(errs, fmt.Errorf("serve http: %w", err))
	case err := <-relayErr:
		// Before stopBackground, Run returns only when it cannot start (see above).
		errs = append(errs, fmt.Errorf("outbox relay: %w", err), shutdownHTTP(ctx, srv, serveErr))
	case <-ctx.Done():
		logger.Info("shutting down")
		errs = append(errs, shutdownHTTP(ctx, srv, serveErr))
	}
	stopBackground()
	background.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}

// shutdownHTTP stops srv within httpShutdownTimeout, even though ctx has ended, and
// waits for its Serve to return.
func shutdownHTTP(ctx context.Context, srv *http.Server, serveErr <-chan error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownTimeout)
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

// openPool connects to the payments database and migrates it.
func openPool(ctx context.Context, cfg config) (*pgxpool.Pool, error) {
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		// The parse error may contain the password; say only what to fix.
		return nil, errors.New("DATABASE_URL does not parse: use postgres://user@host:port/dbname?sslmode=disable")
	}
	poolCfg.MaxConns = int32(cfg.DatabaseMaxConns) // Validate keeps it within int32
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
