package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dscourse/payments-outbox/internal/outbox"
)

// relayHandle is what run needs from the outbox relay that runs inside the API process.
type relayHandle struct {
	// Notify nudges the relay after a payment commits, so it publishes without waiting
	// for its next poll. Safe to call from many goroutines; never blocks.
	Notify func()
	// Admin serves the operator endpoints under /admin/ (DLQ list and replay); nil if none.
	Admin http.Handler
	// Stop stops claiming new batches, lets the batch in flight finish or release its
	// lease, and closes the Kafka client, within ctx's deadline.
	Stop func(ctx context.Context) error
}

// startRelay starts the outbox relay and its cleaner as goroutines that run until Stop
// (or ctx) ends them.
func startRelay(ctx context.Context, cfg config, pool *pgxpool.Pool, logger *slog.Logger, reg prometheus.Registerer) (*relayHandle, error) {
	relayCfg, cleanerCfg, err := relayConfigFromEnv(cfg.getenv)
	if err != nil {
		return nil, err
	}
	relayCfg.Brokers = cfg.KafkaBrokers
	relayCfg.Topic = cfg.KafkaTopic
	relayCfg.AlertWebhookURL = cfg.AlertWebhookURL

	metrics := outbox.NewMetrics(reg)
	relay, err := outbox.NewRelay(pool, relayCfg, logger, metrics)
	if err != nil {
		return nil, err
	}
	cleaner, err := outbox.NewCleaner(pool, cleanerCfg, logger, metrics)
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := relay.Run(ctx); err != nil {
			logger.Error("outbox relay stopped", "err", err)
		}
	})
	wg.Go(func() { cleaner.Run(ctx) })
	stopped := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
	}()

	var admin http.Handler
	if cfg.AdminToken != "" {
		admin = relay.AdminHandler(cfg.AdminToken)
	}
	return &relayHandle{
		Notify: relay.Notify,
		Admin:  admin,
		Stop: func(stopCtx context.Context) error {
			cancel()
			select {
			case <-stopped:
				return nil
			case <-stopCtx.Done():
				return fmt.Errorf("wait for the outbox relay: %w", stopCtx.Err())
			}
		},
	}, nil
}

// relayConfigFromEnv reads the relay's tuning from RELAY_* variables; unset ones keep
// the defaults documented on outbox.RelayConfig and outbox.CleanerConfig.
//
//	RELAY_WORKERS            workers claiming batches (4)
//	RELAY_BATCH_SIZE         rows per claim (1000)
//	RELAY_LEASE              lease on claimed rows (30s)
//	RELAY_PUBLISH_TIMEOUT    bound of one publish attempt (5s)
//	RELAY_POLL_INTERVAL      fallback poll (1s)
//	RELAY_MAX_REJECTIONS     broker rejections before the DLQ (5)
//	RELAY_OUTAGE_BACKOFF_MAX cap of the relay's pause during a broker outage (10s)
//	RELAY_SHUTDOWN_TIMEOUT   grace for the batch in flight at stop (10s)
//	RELAY_RETENTION          how long published rows are kept (720h)
//	RELAY_CLEANUP_INTERVAL   how often the cleaner runs (1m)
//	RELAY_ALERT_ROUTING_KEY  routing_key of the DLQ alert webhook body (empty)
func relayConfigFromEnv(getenv func(string) string) (outbox.RelayConfig, outbox.CleanerConfig, error) {
	var errs []error
	integer := func(name string) int {
		v := getenv(name)
		if v == "" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s=%q is not a positive integer: set e.g. %s=4, or leave it unset for the default", name, v, name))
		}
		return n
	}
	duration := func(name string) time.Duration {
		v := getenv(name)
		if v == "" {
			return 0
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q is not a positive duration: use Go syntax such as 500ms, 30s or 720h", name, v))
		}
		return d
	}
	relayCfg := outbox.RelayConfig{
		Workers:          integer("RELAY_WORKERS"),
		BatchSize:        integer("RELAY_BATCH_SIZE"),
		Lease:            duration("RELAY_LEASE"),
		PublishTimeout:   duration("RELAY_PUBLISH_TIMEOUT"),
		PollInterval:     duration("RELAY_POLL_INTERVAL"),
		MaxRejections:    integer("RELAY_MAX_REJECTIONS"),
		OutageBackoffMax: duration("RELAY_OUTAGE_BACKOFF_MAX"),
		ShutdownTimeout:  duration("RELAY_SHUTDOWN_TIMEOUT"),
		AlertRoutingKey:  getenv("RELAY_ALERT_ROUTING_KEY"),
	}
	cleanerCfg := outbox.CleanerConfig{
		Retention: duration("RELAY_RETENTION"),
		Interval:  duration("RELAY_CLEANUP_INTERVAL"),
	}
	if err := errors.Join(errs...); err != nil {
		return outbox.RelayConfig{}, outbox.CleanerConfig{}, err
	}
	return relayCfg, cleanerCfg, nil
}
