package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
	"github.com/dscourse/payments-outbox/internal/payment"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/internal/webhooksig"
)

func TestLoadConfigFillsDefaults(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:55432/payments"}

	got, err := loadConfig(func(k string) string { return env[k] })

	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	want := config{
		DatabaseURL:      "postgres://postgres@127.0.0.1:55432/payments",
		DatabaseMaxConns: 16,
		KeyCache:         merchant.KeyCacheConfig{TTL: 5 * time.Second},
		HTTPAddr:         "127.0.0.1:8080",
		AdminAddr:        "127.0.0.1:9090",
		RelayMode:        "poll",
		// Zero tuning fields: the defaults documented on poll.Config, but for the
		// relay's shares of the stop budget.
		Relay: poll.Config{Brokers: []string{"127.0.0.1:19092"}, Topic: "payments.events",
			ShutdownTimeout: stopRelayBatches, QueryTimeout: stopRelayQuery, AlertTimeout: stopRelayAlert},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

func TestLoadConfigReadsEveryVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":         "postgres://db/payments",
		"DATABASE_MAX_CONNS":   "32",
		"KAFKA_BROKERS":        " 127.0.0.1:29092, 127.0.0.1:29093 ,",
		"KAFKA_TOPIC":          "t",
		"HTTP_ADDR":            ":9000",
		"API_KEY_CACHE_TTL":    "1s",
		"DUAL_WRITE":           "true",
		"ADMIN_ADDR":           "127.0.0.1:9999",
		"ADMIN_TOKEN":          "s3cret-s3cret-s3cret-s3cret-0123",
		"ALERT_WEBHOOK_URL":    "http://127.0.0.1:9999/hook",
		"ALERT_WEBHOOK_SECRET": testAlertSecret,
		"RELAY_MODE":           "cdc",
		"RELAY_CDC_SLOT":       "outbox_cdc_replicas",

		"RELAY_WORKERS":            "8",
		"RELAY_BATCH_SIZE":         "500",
		"RELAY_LEASE":              "1m",
		"RELAY_PUBLISH_TIMEOUT":    "10s",
		"RELAY_POLL_INTERVAL":      "2s",
		"RELAY_IDLE_POLL_INTERVAL": "50ms",
		"RELAY_MAX_REJECTIONS":     "3",
		"RELAY_OUTAGE_BACKOFF_MAX": "20s",
		"RELAY_SHUTDOWN_TIMEOUT":   "3s",
		"RELAY_ALERT_ROUTING_KEY":  "rk",
		"RELAY_RETENTION":          "48h",
		"RELAY_CLEANUP_INTERVAL":   "5m",

		"RELAY_FAULT_HOLD_BEFORE_MARK": "15s",

		"IDEMPOTENCY_KEY_RETENTION":    "1h",
		"IDEMPOTENCY_CLEANUP_INTERVAL": "1m",
	}

	got, err := loadConfig(func(k string) string { return env[k] })

	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	want := config{
		DatabaseURL:      "postgres://db/payments",
		DatabaseMaxConns: 32,
		KeyCache:         merchant.KeyCacheConfig{TTL: time.Second},
		HTTPAddr:         ":9000",
		DualWrite:        true,
		AdminAddr:        "127.0.0.1:9999",
		AdminToken:       "s3cret-s3cret-s3cret-s3cret-0123",
		RelayMode:        "cdc",
		CDCSlot:          "outbox_cdc_replicas",
		Relay: poll.Config{
			Brokers:          []string{"127.0.0.1:29092", "127.0.0.1:29093"},
			Topic:            "t",
			AlertWebhookURL:  "http://127.0.0.1:9999/hook",
			Workers:          8,
			BatchSize:        500,
			Lease:            time.Minute,
			PublishTimeout:   10 * time.Second,
			IdlePollInterval: 50 * time.Millisecond,
			PollInterval:     2 * time.Second,
			MaxRejections:    3,
			OutageBackoffMax: 20 * time.Second,
			ShutdownTimeout:  3 * time.Second,
			QueryTimeout:     stopRelayQuery,
			AlertTimeout:     stopRelayAlert,
			AlertRoutingKey:  "rk",
			AlertSecret:      mustParseSecret(t, testAlertSecret),

			FaultHoldBeforeMark: 15 * time.Second,
		},
		Cleaner: outbox.CleanerConfig{Retention: 48 * time.Hour, Interval: 5 * time.Minute},
		Keys:    payment.KeyCleanerConfig{Retention: time.Hour, Interval: time.Minute},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

// Every mistake is reported with the variable's name and how to fix it.
func TestLoadConfigRejectsBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"no database", map[string]string{}, []string{"DATABASE_URL is required", "postgres://"}},
		{"bad dual write", map[string]string{"DATABASE_URL": "x", "DUAL_WRITE": "yes please"}, []string{"DUAL_WRITE", "true or false"}},
		{"unknown relay mode", map[string]string{"DATABASE_URL": "x", "RELAY_MODE": "push"}, []string{"RELAY_MODE", "poll", "cdc"}},
		{"bad slot name", map[string]string{"DATABASE_URL": "postgres://db/payments", "RELAY_MODE": "cdc", "RELAY_CDC_SLOT": "Bad-Name"}, []string{"RELAY_CDC_SLOT"}},
		{"bad pool size", map[string]string{"DATABASE_URL": "x", "DATABASE_MAX_CONNS": "many"}, []string{"DATABASE_MAX_CONNS", "e.g. 16"}},
		{"zero pool size", map[string]string{"DATABASE_URL": "x", "DATABASE_MAX_CONNS": "0"}, []string{"DATABASE_MAX_CONNS=0", "at least 1"}},
		{"bad address", map[string]string{"DATABASE_URL": "x", "HTTP_ADDR": "8080"}, []string{"HTTP_ADDR", "127.0.0.1:8080"}},
		{"bad broker", map[string]string{"DATABASE_URL": "x", "KAFKA_BROKERS": "kafka"}, []string{"KAFKA_BROKERS", "host:port"}},
		{"empty brokers", map[string]string{"DATABASE_URL": "x", "KAFKA_BROKERS": ","}, []string{"KAFKA_BROKERS is empty"}},
		{"bad webhook", map[string]string{"DATABASE_URL": "x", "ALERT_WEBHOOK_URL": "ftp://x"}, []string{"ALERT_WEBHOOK_URL", "http(s)"}},
		{"secret without its prefix", map[string]string{"DATABASE_URL": "x", "ALERT_WEBHOOK_URL": "http://h/", "ALERT_WEBHOOK_SECRET": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
			[]string{"ALERT_WEBHOOK_SECRET", "whsec_", "leave it unset"}},
		{"short secret", map[string]string{"DATABASE_URL": "x", "ALERT_WEBHOOK_URL": "http://h/", "ALERT_WEBHOOK_SECRET": "whsec_c2hvcnQ="},
			[]string{"ALERT_WEBHOOK_SECRET", "5 bytes, want 24 to 64", "openssl rand -base64 32"}},
		{"secret without a webhook", map[string]string{"DATABASE_URL": "x", "ALERT_WEBHOOK_SECRET": testAlertSecret}, []string{"ALERT_WEBHOOK_SECRET is set but ALERT_WEBHOOK_URL is not"}},
		{"bad admin address", map[string]string{"DATABASE_URL": "x", "ADMIN_ADDR": "9090"}, []string{"ADMIN_ADDR", "127.0.0.1:9090"}},
		{"admin on the API's listener", map[string]string{"DATABASE_URL": "x", "ADMIN_ADDR": "127.0.0.1:8080"}, []string{"ADMIN_ADDR", "listener of their own"}},
		{"short admin token", map[string]string{"DATABASE_URL": "x", "ADMIN_TOKEN": "local-admin-token"}, []string{"ADMIN_TOKEN is 17 bytes", "at least 32"}},
		{"negative key cache", map[string]string{"DATABASE_URL": "x", "API_KEY_CACHE_TTL": "-1s"}, []string{"API_KEY_CACHE_TTL=-1s", "0 to look every key up"}},
		{"stop over budget", map[string]string{"DATABASE_URL": "x", "RELAY_SHUTDOWN_TIMEOUT": "10s"}, []string{"RELAY_SHUTDOWN_TIMEOUT=10s", "25s budget", "at most 5s"}},
		{"two mistakes at once", map[string]string{"HTTP_ADDR": "nope"}, []string{"DATABASE_URL is required", "HTTP_ADDR"}},
		{"parse and validation mistakes at once", map[string]string{"DUAL_WRITE": "maybe"}, []string{"DUAL_WRITE", "DATABASE_URL is required"}},
		{"relay workers not a number", map[string]string{"DATABASE_URL": "x", "RELAY_WORKERS": "four"}, []string{"RELAY_WORKERS", "positive integer"}},
		{"relay workers zero", map[string]string{"DATABASE_URL": "x", "RELAY_WORKERS": "0"}, []string{"RELAY_WORKERS", "at least 1"}},
		{"relay poll interval negative", map[string]string{"DATABASE_URL": "x", "RELAY_POLL_INTERVAL": "-1s"}, []string{"RELAY_POLL_INTERVAL", "positive duration"}},
		{"relay lease shorter than a publish", map[string]string{"DATABASE_URL": "x", "RELAY_LEASE": "2s"}, []string{"outbox relay", "RELAY_LEASE"}},
		{"unknown SASL mechanism", map[string]string{"DATABASE_URL": "x", "KAFKA_SASL_MECHANISM": "GSSAPI", "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": testKafkaPassword},
			[]string{`KAFKA_SASL_MECHANISM="GSSAPI"`, "SCRAM-SHA-512"}},
		{"SASL without a password", map[string]string{"DATABASE_URL": "x", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "u"}, []string{"needs a password", "KAFKA_SASL_PASSWORD_FILE"}},
		{"missing CA file", map[string]string{"DATABASE_URL": "x", "KAFKA_TLS_CA_FILE": "/nonexistent/ca.pem"}, []string{"KAFKA_TLS_CA_FILE", "no such file"}},
		{"cleaner retention not a duration", map[string]string{"DATABASE_URL": "x", "RELAY_RETENTION": "30 days"}, []string{"RELAY_RETENTION", "720h"}},
	}
	for _, tt := range tests {
		_, err := loadConfig(func(k string) string { return tt.env[k] })
		if err != nil && tt.env["ADMIN_TOKEN"] != "" && strings.Contains(err.Error(), tt.env["ADMIN_TOKEN"]) {
			t.Errorf("%s: error %q prints the admin token", tt.name, err)
		}
		if err != nil && strings.Contains(err.Error(), testKafkaPassword) {
			t.Errorf("%s: error %q prints the Kafka password", tt.name, err)
		}
		if secret := strings.TrimPrefix(tt.env["ALERT_WEBHOOK_SECRET"], "whsec_"); err != nil && secret != "" && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error %q prints the alert secret", tt.name, err)
		}
		if err == nil {
			t.Errorf("%s: loadConfig succeeded, want an error", tt.name)
			continue
		}
		for _, want := range tt.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not contain %q", tt.name, err, want)
			}
		}
	}
}

// A webhook URL carries its secret: a bad one is named by its host, never printed.
func TestLoadConfigNeverPrintsSecrets(t *testing.T) {
	t.Parallel()
	const secret = "T0KEN-in-the-path"
	for _, webhook := range []string{"ftp://hooks.example.com/" + secret, "hooks.example.com/" + secret, "::" + secret} {
		_, err := loadConfig(func(k string) string {
			return map[string]string{"DATABASE_URL": "x", "ALERT_WEBHOOK_URL": webhook}[k]
		})
		if err == nil || !strings.Contains(err.Error(), "ALERT_WEBHOOK_URL") {
			t.Errorf("ALERT_WEBHOOK_URL=%s: error %v, want one naming ALERT_WEBHOOK_URL", webhook, err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("ALERT_WEBHOOK_URL=%s: error %q prints the URL's secret", webhook, err)
		}
	}
}

// The stop budget adds up: its stages, with the default relay settings, fit in it.
func TestStopBudgetAddsUp(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(func(k string) string { return map[string]string{"DATABASE_URL": "x"}[k] })
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if got := cfg.stopTotal(); got > stopBudget || stopBudget > 25*time.Second {
		t.Errorf("worst-case stop %s, budget %s: want the stop within a budget of at most 25 s (a pod's 30 s grace)", got, stopBudget)
	}
}

// testAlertSecret is a valid ALERT_WEBHOOK_SECRET (a 24-byte key).
const testAlertSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func mustParseSecret(t *testing.T, s string) webhooksig.Secret {
	t.Helper()
	secret, err := webhooksig.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	return secret
}

// Alerts sent unsigned are allowed, and said at start; signed ones, or none, are not
// worth a line.
func TestUnsignedAlertsAreAWarnAtStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		env      map[string]string
		wantWarn bool
	}{
		{"webhook without a secret", map[string]string{"DATABASE_URL": "x", "ALERT_WEBHOOK_URL": "http://h/"}, true},
		{"webhook with a secret", map[string]string{"DATABASE_URL": "x", "ALERT_WEBHOOK_URL": "http://h/", "ALERT_WEBHOOK_SECRET": testAlertSecret}, false},
		{"no webhook", map[string]string{"DATABASE_URL": "x"}, false},
	}
	for _, tt := range tests {
		cfg, err := loadConfig(func(k string) string { return tt.env[k] })
		if err != nil {
			t.Fatalf("%s: loadConfig: %v", tt.name, err)
		}
		var logs strings.Builder
		logUnsignedAlerts(cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
		warned := strings.Contains(logs.String(), `"level":"WARN"`) && strings.Contains(logs.String(), "ALERT_WEBHOOK_SECRET is unset")
		if warned != tt.wantWarn {
			t.Errorf("%s: warned %t, want %t; logs:\n%s", tt.name, warned, tt.wantWarn, logs.String())
		}
	}
}

// Both relays get the alert settings, the secret included.
func TestBothRelaysGetTheAlertSettings(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://db/payments", "ALERT_WEBHOOK_URL": "http://h/", "ALERT_WEBHOOK_SECRET": testAlertSecret, "RELAY_ALERT_ROUTING_KEY": "rk"}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	want := mustParseSecret(t, testAlertSecret)
	cdc := cfg.cdcConfig()
	if !cfg.Relay.AlertSecret.Equal(want) || !cdc.AlertSecret.Equal(want) {
		t.Errorf("alert secret of the polling relay %v, of the CDC relay %v: want both set", !cfg.Relay.AlertSecret.IsZero(), !cdc.AlertSecret.IsZero())
	}
	if cdc.AlertWebhookURL != "http://h/" || cdc.AlertRoutingKey != "rk" {
		t.Errorf("CDC relay's webhook %q, routing key %q: want http://h/ and rk", cdc.AlertWebhookURL, cdc.AlertRoutingKey)
	}
}

// testKafkaPassword is a KAFKA_SASL_PASSWORD no error may print.
const testKafkaPassword = "kafka-Pa55word-never-printed"

// The Kafka security settings reach every Kafka client of the API: both relays' (the
// dual-write handler takes the polling relay's ClientOpts, in serve).
func TestBothRelaysGetTheKafkaSecurity(t *testing.T) {
	t.Parallel()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, testenv.UnknownCAPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"DATABASE_URL": "postgres://db/payments", "KAFKA_TLS_CA_FILE": caFile,
		"KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "KAFKA_SASL_USERNAME": "payments", "KAFKA_SASL_PASSWORD": testKafkaPassword,
	}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if got, want := cfg.Kafka.String(), "TLS (CA "+caFile+"), SASL SCRAM-SHA-256 as payments"; got != want {
		t.Errorf("Kafka = %q, want %q", got, want)
	}
	// One option for TLS, one for SASL.
	if n := len(cfg.Relay.ClientOpts); n != 2 {
		t.Errorf("polling relay: %d client options, want 2 (TLS, SASL)", n)
	}
	if n := len(cfg.cdcConfig().ClientOpts); n != 2 {
		t.Errorf("CDC relay: %d client options, want 2 (TLS, SASL)", n)
	}
}
