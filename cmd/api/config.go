package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"time"

	"github.com/dscourse/payments-outbox/internal/envconfig"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
	"github.com/dscourse/payments-outbox/internal/payment"
	"github.com/dscourse/payments-outbox/internal/webhooksig"
)

// config is everything cmd/api reads from its environment (docs/contract.md lists the
// variables). loadConfig reads and validates all of it before serve opens any
// connection, so that a typo stops the process at once, not after it migrated.
type config struct {
	// DatabaseURL (DATABASE_URL, required) is the payments database, e.g.
	// postgres://postgres@127.0.0.1:55432/payments?sslmode=disable.
	DatabaseURL string
	// DatabaseMaxConns (DATABASE_MAX_CONNS, default 16) bounds the pool. Each payment
	// holds a connection for one short transaction; commits of concurrent transactions
	// share one WAL flush, so a few more connections than cores pay off (see make bench).
	DatabaseMaxConns int
	// KeyCache (API_KEY_CACHE_TTL, default 5s; 0 turns it off) is how long the merchant
	// of a live API key is remembered (merchant.KeyCache), which saves a query per
	// request; a revoked key stops working within it.
	KeyCache merchant.KeyCacheConfig
	// HTTPAddr (HTTP_ADDR, default 127.0.0.1:8080) is where the API listens; port 0
	// picks a free port, which run logs.
	HTTPAddr string
	// DualWrite (DUAL_WRITE, default false) replaces the outbox write path with the
	// dual-write anti-pattern. TEACHING ONLY: it loses events on purpose.
	DualWrite bool
	// AdminAddr (ADMIN_ADDR, default 127.0.0.1:9090) is the operators' listener:
	// /metrics and the relay's /admin/ endpoints, never on HTTPAddr. Loopback by
	// default, so that only the host (or a sidecar, or a scraper told the address)
	// reaches it; port 0 picks a free port, which run logs.
	AdminAddr string
	// AdminToken (ADMIN_TOKEN, default empty) guards the relay's /admin/ endpoints;
	// empty, the endpoints do not exist. At least minAdminTokenBytes long.
	AdminToken string

	// RelayMode (RELAY_MODE, default poll) chooses the relay that publishes the outbox:
	// "poll", the polling relay (package outbox: one transaction per batch, whose row
	// locks are the lease), or "cdc", the change-data-capture relay (package
	// outbox/cdc: reads the inserts from a logical replication slot; the server needs
	// wal_level=logical). docs/adr/0003
	// compares them. Both read the RELAY_* settings below that apply to them.
	RelayMode string
	// CDCSlot (RELAY_CDC_SLOT, default outbox_cdc_<database>) names the replication
	// slot of the CDC relay; every replica of one API must use the same.
	CDCSlot string

	// Kafka is how every Kafka client of the API (the relay's, the dual-write
	// handler's) reaches the brokers: TLS and SASL from KAFKA_TLS_* and KAFKA_SASL_*
	// (kafkasec.Config documents each); unset, plaintext. loadConfig turns it into
	// Relay.ClientOpts, reading its files once, at start.
	Kafka kafkasec.Config

	// Relay configures the outbox relay. The dual-write handler publishes to the same
	// Brokers and Topic, with the same ClientOpts.
	//
	//	KAFKA_BROKERS            seed brokers, comma-separated (127.0.0.1:19092;
	//	                         127.0.0.1:29092 under chaos, through Toxiproxy)
	//	KAFKA_TOPIC              topic of the payment events (payments.events)
	//	ALERT_WEBHOOK_URL        receives the dead-letter alerts (empty: only logged)
	//	ALERT_WEBHOOK_SECRET     whsec_<base64 key of 24 to 64 bytes>: signs each
	//	                         alert as Standard Webhooks does (empty: unsigned,
	//	                         and a Warn at start; see alertSecret)
	//	RELAY_WORKERS            workers claiming batches
	//	RELAY_BATCH_SIZE         rows per claim
	//	RELAY_LEASE              how long a batch may hold its rows (the idle timeout
	//	                         of its transaction)
	//	RELAY_PUBLISH_TIMEOUT    bound of one publish attempt
	//	RELAY_IDLE_POLL_INTERVAL how often an idle relay looks for other replicas'
	//	                         commits
	//	RELAY_POLL_INTERVAL      a worker's poll after a database error
	//	RELAY_MAX_REJECTIONS     broker rejections before the DLQ
	//	RELAY_OUTAGE_BACKOFF_MAX cap of a failed event's backoff and of the relay's
	//	                         pause during a broker outage
	//	RELAY_SHUTDOWN_TIMEOUT   grace for the batch in flight at stop
	//	RELAY_ALERT_ROUTING_KEY  routing_key of the alert webhook body
	//	RELAY_FAULT_TIMESTAMP_SKEW  FAULT INJECTION, chaos only: record timestamps
	//	                         moved this far from now (default 0, off)
	//	RELAY_FAULT_HOLD_BEFORE_MARK  FAULT INJECTION, chaos only: one acknowledged
	//	                         batch in ten waits this long before its mark (default 0, off)
	//
	// An unset RELAY_* variable leaves the field zero, which poll.Config
	// documents as its default: the defaults live in one place.
	Relay poll.Config
	// Cleaner configures the deletion of published outbox rows, with the same rule for
	// unset variables (defaults on outbox.CleanerConfig).
	//
	//	RELAY_RETENTION          how long published rows are kept
	//	RELAY_CLEANUP_INTERVAL   how often the cleaner runs
	Cleaner outbox.CleanerConfig
	// Keys configures the deletion of expired Idempotency-Keys (defaults on
	// payment.KeyCleanerConfig).
	//
	//	IDEMPOTENCY_KEY_RETENTION     how long a key replays its answer (24h)
	//	IDEMPOTENCY_CLEANUP_INTERVAL  how often expired keys are deleted (10m)
	Keys payment.KeyCleanerConfig
}

// defaultKeyCacheTTL is API_KEY_CACHE_TTL's default: a revoked key works for at most
// 5 s more, while a merchant's key is looked up about once per 5 s per process instead
// of once per request.
const defaultKeyCacheTTL = 5 * time.Second

// minAdminTokenBytes is the shortest ADMIN_TOKEN accepted: 32 bytes, 256 bits if
// random, beyond guessing through the 401s of /admin/.
const minAdminTokenBytes = 32

// urlHost is u's host, or "" when u is nil (it did not parse): the one part of a URL
// that is safe to print.
func urlHost(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Host
}

// loadConfig reads the environment through getenv, fills in the defaults and validates
// the result. Every mistake is reported at once, each with how to fix it.
func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{
		DatabaseURL:      env.String("DATABASE_URL", ""),
		DatabaseMaxConns: env.Int("DATABASE_MAX_CONNS", 16),
		KeyCache:         merchant.KeyCacheConfig{TTL: env.Duration("API_KEY_CACHE_TTL", defaultKeyCacheTTL)},
		HTTPAddr:         env.String("HTTP_ADDR", "127.0.0.1:8080"),
		DualWrite:        env.Bool("DUAL_WRITE", false),
		AdminAddr:        env.String("ADMIN_ADDR", "127.0.0.1:9090"),
		AdminToken:       env.String("ADMIN_TOKEN", ""),
		RelayMode:        env.String("RELAY_MODE", relayModePoll),
		Kafka:            kafkasec.Load(env),
		CDCSlot:          env.String("RELAY_CDC_SLOT", ""),
		Relay: poll.Config{
			Brokers:          env.List("KAFKA_BROKERS", "127.0.0.1:19092"),
			Topic:            env.String("KAFKA_TOPIC", event.DefaultTopic),
			AlertWebhookURL:  env.String("ALERT_WEBHOOK_URL", ""),
			Workers:          env.PositiveInt("RELAY_WORKERS", 0),
			BatchSize:        env.PositiveInt("RELAY_BATCH_SIZE", 0),
			Lease:            env.PositiveDuration("RELAY_LEASE", 0),
			PublishTimeout:   env.PositiveDuration("RELAY_PUBLISH_TIMEOUT", 0),
			IdlePollInterval: env.PositiveDuration("RELAY_IDLE_POLL_INTERVAL", 0),
			PollInterval:     env.PositiveDuration("RELAY_POLL_INTERVAL", 0),
			MaxRejections:    env.PositiveInt("RELAY_MAX_REJECTIONS", 0),
			OutageBackoffMax: env.PositiveDuration("RELAY_OUTAGE_BACKOFF_MAX", 0),
			// The relay's share of the stop budget (server.go), set here rather than
			// left to outbox's defaults so that the budget is checked in one place.
			ShutdownTimeout: env.PositiveDuration("RELAY_SHUTDOWN_TIMEOUT", stopRelayBatches),
			QueryTimeout:    stopRelayQuery,
			AlertTimeout:    stopRelayAlert,
			AlertRoutingKey: env.String("RELAY_ALERT_ROUTING_KEY", ""),
			// Fault injection for the clock-skew chaos scenario (docs/contract.md).
			FaultTimestampSkew: env.Duration("RELAY_FAULT_TIMESTAMP_SKEW", 0),
			// Fault injection for the replica-pause chaos scenario (docs/contract.md).
			FaultHoldBeforeMark: env.Duration("RELAY_FAULT_HOLD_BEFORE_MARK", 0),
		},
		Cleaner: outbox.CleanerConfig{
			Retention: env.PositiveDuration("RELAY_RETENTION", 0),
			Interval:  env.PositiveDuration("RELAY_CLEANUP_INTERVAL", 0),
		},
		Keys: payment.KeyCleanerConfig{
			Retention: env.PositiveDuration("IDEMPOTENCY_KEY_RETENTION", 0),
			Interval:  env.PositiveDuration("IDEMPOTENCY_CLEANUP_INTERVAL", 0),
		},
	}
	secret, secretErr := alertSecret(env.String("ALERT_WEBHOOK_SECRET", ""))
	cfg.Relay.AlertSecret = secret
	// ClientOpts checks the Kafka security settings and reads their files (the CA, the
	// password file): a missing one stops the start here.
	kafkaOpts, kafkaErr := cfg.Kafka.ClientOpts()
	cfg.Relay.ClientOpts = kafkaOpts
	// A value that did not parse reads as its fallback, so Validate still has something
	// to check, and the operator learns of every mistake in one start.
	if err := errors.Join(env.Err(), secretErr, kafkaErr, cfg.Validate()); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// alertSecret parses ALERT_WEBHOOK_SECRET; unset, it is the zero Secret, and the
// alerts go out unsigned.
//
// Unsigned alerts are allowed, with a Warn at start (logUnsignedAlerts), rather than
// refused: the alert is a copy of the Error log line, for a receiver of the operators'
// own choosing, and refusing to start would stop every deployment whose receiver
// cannot check a signature yet, taking the relay down with it. Signing is for when
// the receiver can check it; the Warn says what an unsigned alert risks.
func alertSecret(value string) (webhooksig.Secret, error) {
	if value == "" {
		return webhooksig.Secret{}, nil
	}
	secret, err := webhooksig.ParseSecret(value)
	if err != nil {
		// ParseSecret's errors never quote the secret.
		return webhooksig.Secret{}, fmt.Errorf("ALERT_WEBHOOK_SECRET: %w, or leave it unset to send the alerts unsigned", err)
	}
	return secret, nil
}

// logUnsignedAlerts warns at start when the alerts go to a webhook unsigned.
func logUnsignedAlerts(c config, logger *slog.Logger) {
	if c.Relay.AlertWebhookURL != "" && c.Relay.AlertSecret.IsZero() {
		logger.Warn("ALERT_WEBHOOK_SECRET is unset: the dead-letter alerts are sent unsigned, and their receiver cannot tell them from forged ones; set it to whsec_ and the base64 of a random key (openssl rand -base64 32)")
	}
}

// Validate checks the configuration before anything starts, and says how to fix it.
func (c config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL is required: set it to the payments database, e.g. postgres://postgres@127.0.0.1:55432/payments?sslmode=disable (make run-api does this for the native stack)"))
	}
	// pgxpool counts connections in an int32.
	if c.DatabaseMaxConns < 1 || c.DatabaseMaxConns > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("DATABASE_MAX_CONNS=%d: the pool needs at least 1 connection, e.g. 16", c.DatabaseMaxConns))
	}
	if c.KeyCache.TTL < 0 {
		errs = append(errs, fmt.Errorf("API_KEY_CACHE_TTL=%s: a revoked key works for this long at most; use e.g. 5s, or 0 to look every key up", c.KeyCache.TTL))
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("HTTP_ADDR=%q is not host:port: use e.g. 127.0.0.1:8080, or :8080 for every interface", c.HTTPAddr))
	}
	if _, port, err := net.SplitHostPort(c.AdminAddr); err != nil {
		errs = append(errs, fmt.Errorf("ADMIN_ADDR=%q is not host:port: use e.g. 127.0.0.1:9090 (loopback: only this host scrapes /metrics)", c.AdminAddr))
	} else if c.AdminAddr == c.HTTPAddr && port != "0" {
		errs = append(errs, fmt.Errorf("ADMIN_ADDR=%q is HTTP_ADDR too: /metrics and /admin/ need a listener of their own, e.g. 127.0.0.1:9090", c.AdminAddr))
	}
	if c.AdminToken != "" && len(c.AdminToken) < minAdminTokenBytes {
		// The token's value is never printed, only its length.
		errs = append(errs, fmt.Errorf("ADMIN_TOKEN is %d bytes, want at least %d: generate one with openssl rand -hex 32, or leave it unset to turn the /admin/ endpoints off",
			len(c.AdminToken), minAdminTokenBytes))
	}
	if stop := c.stopTotal(); stop > stopBudget {
		errs = append(errs, fmt.Errorf("RELAY_SHUTDOWN_TIMEOUT=%s makes the worst-case stop %s, above the %s budget (a Kubernetes pod gets 30 s): use at most %s",
			c.Relay.ShutdownTimeout, stop, stopBudget, c.Relay.ShutdownTimeout-(stop-stopBudget)))
	}
	if len(c.Relay.Brokers) == 0 {
		errs = append(errs, errors.New("KAFKA_BROKERS is empty: list the seed brokers, e.g. 127.0.0.1:19092"))
	}
	for _, b := range c.Relay.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, fmt.Errorf("KAFKA_BROKERS: %q is not host:port: use e.g. 127.0.0.1:19092,127.0.0.1:19093", b))
		}
	}
	if c.Relay.AlertWebhookURL != "" {
		u, err := url.Parse(c.Relay.AlertWebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// Webhook URLs carry their secret in the path or query: name the host only.
			errs = append(errs, fmt.Errorf("ALERT_WEBHOOK_URL (host %q) is not an http(s) URL: use e.g. https://alerts.example.com/hook, or leave it unset to only log alerts", urlHost(u)))
		}
	}
	if !c.Relay.AlertSecret.IsZero() && c.Relay.AlertWebhookURL == "" {
		errs = append(errs, errors.New("ALERT_WEBHOOK_SECRET is set but ALERT_WEBHOOK_URL is not: there is no webhook call to sign; set the URL too, or unset the secret"))
	}
	if c.RelayMode != relayModePoll && c.RelayMode != relayModeCDC {
		errs = append(errs, fmt.Errorf("RELAY_MODE=%q: use poll (the polling relay, the default) or cdc (logical replication; needs wal_level=logical)", c.RelayMode))
	}
	if c.RelayMode == relayModeCDC {
		if err := c.cdcConfig().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("CDC relay: %w", err))
		}
	}
	// The relay's and the cleaner's own checks relate several settings (the lease must
	// outlast a publish, for one); their messages name the RELAY_* variable to change.
	if err := c.Relay.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("outbox relay: %w", err))
	}
	if err := c.Cleaner.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("outbox cleaner: %w", err))
	}
	if err := c.Keys.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("idempotency key cleaner: %w", err))
	}
	return errors.Join(errs...)
}
