package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/antifraud"
	"github.com/dscourse/payments-outbox/internal/pgprimary"
	"github.com/dscourse/payments-outbox/migrations"
)

const (
	// shutdownTimeout bounds the HTTP server's shutdown.
	shutdownTimeout = 15 * time.Second
	// startupTimeout bounds connecting to the database and migrating it.
	startupTimeout = 30 * time.Second
)

// serve runs the consumer, the dedup cleaner and a small HTTP server until ctx ends, then shuts down in
// order: the consumer finishes its batch, commits its offsets and leaves the group; then
// the HTTP server stops (so /metrics shows the last batch until the end); the pool closes
// last, because the consumer uses it.
func serve(ctx context.Context, cfg config, logger *slog.Logger, tp trace.TracerProvider) error {
	// A refused password or certificate stops the start; a broker that is down does not.
	if err := cfg.Kafka.CheckAtStart(ctx, cfg.KafkaBrokers, cfg.KafkaClientOpts, logger); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register process metrics: %w", err)
		}
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

	metrics, err := antifraud.NewMetrics(reg)
	if err != nil {
		return err
	}
	consumer, err := antifraud.NewConsumer(pool, antifraud.Config{
		Brokers:           cfg.KafkaBrokers,
		Topic:             cfg.KafkaTopic,
		Group:             cfg.KafkaGroup,
		MaxPollRecords:    cfg.MaxPollRecords,
		Rules:             cfg.Rules,
		RebalanceProtocol: cfg.KafkaRebalanceProtocol,
		ClientOpts:        append(slices.Clip(cfg.KafkaClientOpts), kgo.SessionTimeout(cfg.KafkaSessionTimeout)),
		TracerProvider:    tp,
		AfterDBCommit:     crashHook(cfg.CrashAfterDBCommitProb, logger),
	}, logger, metrics)
	if err != nil {
		return err
	}

	cleaner, err := antifraud.NewCleaner(pool, antifraud.CleanerConfig{Retention: cfg.DedupRetention}, logger)
	if err != nil {
		return err
	}

	srv := &http.Server{
		Handler:           newHandler(reg),
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
	// Tests read the bound address from this line (HTTP_ADDR port 0).
	logger.Info("listening", slog.String("addr", ln.Addr().String()))
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	// The consumer stops with ctx, or earlier if the HTTP server fails.
	consumerCtx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	consumerErr := make(chan error, 1)
	go func() { consumerErr <- consumer.Run(consumerCtx) }()
	cleanerDone := make(chan struct{})
	go func() {
		defer close(cleanerDone)
		cleaner.Run(consumerCtx)
	}()

	var errs []error
	httpStopped := false
	select {
	case err := <-consumerErr:
		// Run returns once ctx is done, or early on a fatal error.
		if err != nil {
			errs = append(errs, fmt.Errorf("consumer: %w", err))
		}
	case err := <-serveErr:
		httpStopped = true
		errs = append(errs, fmt.Errorf("serve http: %w", err))
		stopConsumer()
		if err := <-consumerErr; err != nil {
			errs = append(errs, fmt.Errorf("consumer: %w", err))
		}
	}
	logger.Info("shutting down")
	stopConsumer()
	<-cleanerDone

	if !httpStopped {
		httpCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(httpCtx); err != nil {
			errs = append(errs, fmt.Errorf("shut down http server: %w", err))
		}
		if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("serve http: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}

// newHandler is the whole HTTP surface of the consumer.
func newHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	// The same answer as the API's /healthz: alive, and nothing else checked.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// crashHook returns the consumer's AfterDBCommit hook for the chaos consumer-crash
// scenario, or nil when prob is 0. FAULT INJECTION: with probability prob per batch it
// ends the process at once, after the database commit and before the offset commit,
// which is the window the dedup store exists for. os.Exit runs no deferred function and
// commits nothing, like the SIGKILL the scenario also sends; 137 is the exit status a
// shell reports for a SIGKILLed process.
func crashHook(prob float64, logger *slog.Logger) func() error {
	if prob <= 0 {
		return nil
	}
	logger.Warn("FAULT INJECTION enabled: the process will kill itself between database and offset commits",
		slog.Float64("probability", prob))
	return func() error {
		if rand.Float64() < prob {
			logger.Warn("FAULT INJECTION: exiting between database commit and offset commit")
			os.Exit(137)
		}
		return nil
	}
}

// openPool connects to the antifraud database and migrates it. primary hears of every
// new connection: with a multi-host DATABASE_URL, the pool follows the primary through
// a failover, and primary says when it did.
func openPool(ctx context.Context, cfg config, primary *pgprimary.Watcher) (*pgxpool.Pool, error) {
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		// The parse error may contain the password; say only what to fix.
		return nil, errors.New("DATABASE_URL does not parse: use postgres://user@host:port/dbname?sslmode=disable")
	}
	// One batch at a time uses one connection; the rest serve migrations and spares.
	poolCfg.MaxConns = 4
	poolCfg.AfterConnect = primary.AfterConnect
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to the antifraud database: %w", err)
	}
	if err := migrations.Antifraud.UpPool(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}
