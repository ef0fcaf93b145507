package main

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// config is everything cmd/api reads from its environment (docs/contract.md lists the
// variables). Zero values are replaced by the documented defaults in loadConfig.
type config struct {
	// DatabaseURL (DATABASE_URL, required) is the payments database, e.g.
	// postgres://postgres@127.0.0.1:55432/payments?sslmode=disable.
	DatabaseURL string
	// DatabaseMaxConns (DATABASE_MAX_CONNS, default 16) bounds the pool. Each payment
	// holds a connection for one short transaction; commits of concurrent transactions
	// share one WAL flush, so a few more connections than cores pay off (see make bench).
	DatabaseMaxConns int32
	// KafkaBrokers (KAFKA_BROKERS, default 127.0.0.1:19092) are the relay's seed brokers,
	// comma-separated; 127.0.0.1:29092 under chaos (through Toxiproxy).
	KafkaBrokers []string
	// KafkaTopic (KAFKA_TOPIC, default payments.events) receives the payment events.
	KafkaTopic string
	// HTTPAddr (HTTP_ADDR, default 127.0.0.1:8080) is where the API listens; port 0
	// picks a free port, which run logs.
	HTTPAddr string
	// DualWrite (DUAL_WRITE, default false) replaces the outbox write path with the
	// dual-write anti-pattern. TEACHING ONLY: it loses events on purpose.
	DualWrite bool
	// AdminToken (ADMIN_TOKEN, default empty) guards the relay's /admin/ endpoints.
	AdminToken string
	// AlertWebhookURL (ALERT_WEBHOOK_URL, default empty: alerts are only logged)
	// receives the relay's dead-letter alerts.
	AlertWebhookURL string

	// getenv is the environment the config was read from, so that the relay
	// (relay.go) reads its own RELAY_* variables from the same source.
	getenv func(string) string
}

// loadConfig reads the environment through getenv and fills in the defaults. Values
// that do not parse are reported together, each with how to fix it.
func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{
		DatabaseURL:     getenv("DATABASE_URL"),
		KafkaBrokers:    splitList(cmp.Or(getenv("KAFKA_BROKERS"), "127.0.0.1:19092")),
		KafkaTopic:      cmp.Or(getenv("KAFKA_TOPIC"), "payments.events"),
		HTTPAddr:        cmp.Or(getenv("HTTP_ADDR"), "127.0.0.1:8080"),
		AdminToken:      getenv("ADMIN_TOKEN"),
		AlertWebhookURL: getenv("ALERT_WEBHOOK_URL"),
		getenv:          getenv,
	}
	var errs []error
	maxConns, err := strconv.ParseInt(cmp.Or(getenv("DATABASE_MAX_CONNS"), "16"), 10, 32)
	if err != nil {
		errs = append(errs, fmt.Errorf("DATABASE_MAX_CONNS=%q is not a number: set it to the pool size, e.g. 16", getenv("DATABASE_MAX_CONNS")))
	}
	cfg.DatabaseMaxConns = int32(maxConns)
	if cfg.DualWrite, err = strconv.ParseBool(cmp.Or(getenv("DUAL_WRITE"), "false")); err != nil {
		errs = append(errs, fmt.Errorf("DUAL_WRITE=%q is not a boolean: set it to true or false (or leave it unset)", getenv("DUAL_WRITE")))
	}
	if err := errors.Join(errs...); err != nil {
		return config{}, err
	}
	return cfg, cfg.Validate()
}

// Validate checks the configuration before anything starts, and says how to fix it.
func (c config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL is required: set it to the payments database, e.g. postgres://postgres@127.0.0.1:55432/payments?sslmode=disable (make run-api does this for the native stack)"))
	}
	if c.DatabaseMaxConns < 1 {
		errs = append(errs, fmt.Errorf("DATABASE_MAX_CONNS=%d: the pool needs at least 1 connection", c.DatabaseMaxConns))
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("HTTP_ADDR=%q is not host:port: use e.g. 127.0.0.1:8080, or :8080 for every interface", c.HTTPAddr))
	}
	if len(c.KafkaBrokers) == 0 {
		errs = append(errs, errors.New("KAFKA_BROKERS is empty: list the seed brokers, e.g. 127.0.0.1:19092"))
	}
	for _, b := range c.KafkaBrokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, fmt.Errorf("KAFKA_BROKERS: %q is not host:port: use e.g. 127.0.0.1:19092,127.0.0.1:19093", b))
		}
	}
	if c.AlertWebhookURL != "" {
		u, err := url.Parse(c.AlertWebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("ALERT_WEBHOOK_URL=%q is not an http(s) URL: use e.g. https://alerts.example.com/hook, or leave it unset to only log alerts", c.AlertWebhookURL))
		}
	}
	return errors.Join(errs...)
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
