package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dscourse/payments-outbox/migrations"
)

const (
	// shutdownTimeout bounds each shutdown step: in-flight requests, then the relay.
	shutdownTimeout = 15 * time.Second
	// startupTimeout bounds connecting to the database and migrating it.
	startupTimeout = 30 * time.Second
)

// serve runs the API until ctx ends, then shuts down in order: stop accepting and
// finish in-flight requests, stop the relay (it finishes or releases its batch), and
// close the pool last, because both of the others use it.
func serve(ctx context.Context, cfg config, logger *slog.Logger) error {
	pool, err := openPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	// The relay must outlive the HTTP server, so it does not get the signal context:
	// Stop is what ends it. Canceling relayCtx afterwards is only a backstop.
	relayCtx, cancelRelay := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRelay()
	relay, err := startRelay(relayCtx, cfg, pool, logger, reg)
	if err != nil {
		return fmt.Errorf("start relay: %w", err)
	}

	var createHandler http.Handler
	if cfg.DualWrite {
		// dualwrite.NewHandler logs the TEACHING ONLY warning.
		var closeDualWrite func()
		if createHandler, closeDualWrite, err = dualWriteHandler(cfg, pool, logger); err != nil {
			return errors.Join(fmt.Errorf("dual-write handler: %w", err), stopRelay(ctx, relay))
		}
		// Deferred after the pool's Close, so it runs before it, once HTTP has stopped.
		defer closeDualWrite()
	}

	srv := &http.Server{
		Handler: newHandler(logger, pool, reg, relay, createHandler),
		// Slow or stuck clients must not hold connections and goroutines forever.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return errors.Join(fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err), stopRelay(ctx, relay))
	}
	// Tests and the benchmark read the bound address from this line (HTTP_ADDR port 0).
	logger.Info("listening", slog.String("addr", ln.Addr().String()))

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		// The server stopped without being asked: shut the rest down and say why.
		return errors.Join(fmt.Errorf("serve http: %w", err), stopRelay(ctx, relay))
	case <-ctx.Done():
	}
	logger.Info("shutting down")

	httpCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	var errs []error
	if err := srv.Shutdown(httpCtx); err != nil {
		errs = append(errs, fmt.Errorf("shut down http server: %w", err))
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("serve http: %w", err))
	}
	errs = append(errs, stopRelay(ctx, relay))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}

// stopRelay stops the relay within shutdownTimeout, even if ctx is already canceled.
func stopRelay(ctx context.Context, relay *relayHandle) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := relay.Stop(ctx); err != nil {
		return fmt.Errorf("stop relay: %w", err)
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
	poolCfg.MaxConns = cfg.DatabaseMaxConns
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
		return nil, err
	}
	return pool, nil
}
