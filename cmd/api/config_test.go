package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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
		KafkaBrokers:     []string{"127.0.0.1:19092"},
		KafkaTopic:       "payments.events",
		HTTPAddr:         "127.0.0.1:8080",
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(config{})); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if got.getenv("DATABASE_URL") != env["DATABASE_URL"] {
		t.Errorf("config.getenv does not read the environment it was loaded from")
	}
}

func TestLoadConfigReadsEveryVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":       "postgres://db/payments",
		"DATABASE_MAX_CONNS": "32",
		"KAFKA_BROKERS":      " 127.0.0.1:29092, 127.0.0.1:29093 ,",
		"KAFKA_TOPIC":        "t",
		"HTTP_ADDR":          ":9000",
		"DUAL_WRITE":         "true",
		"ADMIN_TOKEN":        "s3cret",
		"ALERT_WEBHOOK_URL":  "http://127.0.0.1:9999/hook",
	}

	got, err := loadConfig(func(k string) string { return env[k] })

	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	want := config{
		DatabaseURL:      "postgres://db/payments",
		DatabaseMaxConns: 32,
		KafkaBrokers:     []string{"127.0.0.1:29092", "127.0.0.1:29093"},
		KafkaTopic:       "t",
		HTTPAddr:         ":9000",
		DualWrite:        true,
		AdminToken:       "s3cret",
		AlertWebhookURL:  "http://127.0.0.1:9999/hook",
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(config{})); diff != "" {
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
		{"bad pool size", map[string]string{"DATABASE_URL": "x", "DATABASE_MAX_CONNS": "many"}, []string{"DATABASE_MAX_CONNS", "e.g. 16"}},
		{"zero pool size", map[string]string{"DATABASE_URL": "x", "DATABASE_MAX_CONNS": "0"}, []string{"DATABASE_MAX_CONNS=0", "at least 1"}},
		{"bad address", map[string]string{"DATABASE_URL": "x", "HTTP_ADDR": "8080"}, []string{"HTTP_ADDR", "127.0.0.1:8080"}},
		{"bad broker", map[string]string{"DATABASE_URL": "x", "KAFKA_BROKERS": "kafka"}, []string{"KAFKA_BROKERS", "host:port"}},
		{"empty brokers", map[string]string{"DATABASE_URL": "x", "KAFKA_BROKERS": ","}, []string{"KAFKA_BROKERS is empty"}},
		{"bad webhook", map[string]string{"DATABASE_URL": "x", "ALERT_WEBHOOK_URL": "ftp://x"}, []string{"ALERT_WEBHOOK_URL", "http(s)"}},
		{"two mistakes at once", map[string]string{"HTTP_ADDR": "nope"}, []string{"DATABASE_URL is required", "HTTP_ADDR"}},
	}
	for _, tt := range tests {
		_, err := loadConfig(func(k string) string { return tt.env[k] })
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
