package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/antifraud"
)

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:55432/antifraud?sslmode=disable"}
	got, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("loadConfig = %v, want nil", err)
	}
	want := config{
		DatabaseURL:            env["DATABASE_URL"],
		KafkaBrokers:           []string{"127.0.0.1:19092"},
		KafkaTopic:             "payments.events",
		KafkaGroup:             "antifraud",
		HTTPAddr:               "127.0.0.1:8081",
		MaxPollRecords:         16_000,
		KafkaSessionTimeout:    45 * time.Second,
		KafkaRebalanceProtocol: antifraud.RebalanceCooperativeSticky,
		DedupRetention:         90 * 24 * time.Hour,
		Rules:                  antifraud.Rules{ReviewAmount: 100_000, VelocityWindow: 10 * time.Minute, VelocityReview: 5, VelocityBlock: 10, TotalReviewAmount: 1_000_000_000},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("loadConfig mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"no database", map[string]string{"DATABASE_URL": ""}},
		{"bad window", map[string]string{"ANTIFRAUD_VELOCITY_WINDOW": "ten minutes"}},
		{"bad amount", map[string]string{"ANTIFRAUD_REVIEW_AMOUNT": "1e3"}},
		{"block below review", map[string]string{"ANTIFRAUD_VELOCITY_REVIEW": "9", "ANTIFRAUD_VELOCITY_BLOCK": "3"}},
		{"crash probability above 1", map[string]string{"ANTIFRAUD_CRASH_AFTER_DB_COMMIT_PROB": "1.5"}},
		{"bad broker", map[string]string{"KAFKA_BROKERS": "localhost"}},
		{"session timeout below the broker's minimum", map[string]string{"KAFKA_SESSION_TIMEOUT": "1s"}},
		{"unknown rebalance protocol", map[string]string{"KAFKA_REBALANCE_PROTOCOL": "cooperative"}},
		{"rebalance protocol in capitals", map[string]string{"KAFKA_REBALANCE_PROTOCOL": "EAGER"}},
		{"dedup retention too short", map[string]string{"ANTIFRAUD_DEDUP_RETENTION": "1h"}},
		{"bad http addr", map[string]string{"HTTP_ADDR": "8081"}},
		{"unknown SASL mechanism", map[string]string{"KAFKA_SASL_MECHANISM": "KERBEROS", "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p"}},
		{"missing password file", map[string]string{"KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD_FILE": "/nonexistent"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:55432/antifraud"}
			for k, v := range tt.env {
				env[k] = v
			}
			if _, err := loadConfig(func(k string) string { return env[k] }); err == nil {
				t.Errorf("loadConfig(%v) = nil error, want one", tt.env)
			}
		})
	}
}

// Each protocol's name reads as that protocol, and a bad one is refused with the names
// to choose from.
func TestLoadConfigRebalanceProtocol(t *testing.T) {
	t.Parallel()
	for _, want := range antifraud.RebalanceProtocols {
		env := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:55432/antifraud", "KAFKA_REBALANCE_PROTOCOL": string(want)}
		got, err := loadConfig(func(k string) string { return env[k] })
		if err != nil {
			t.Fatalf("KAFKA_REBALANCE_PROTOCOL=%s: loadConfig = %v, want nil", want, err)
		}
		if got.KafkaRebalanceProtocol != want {
			t.Errorf("KAFKA_REBALANCE_PROTOCOL=%s: got %q", want, got.KafkaRebalanceProtocol)
		}
	}
	env := map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:55432/antifraud", "KAFKA_REBALANCE_PROTOCOL": "range"}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "KAFKA_REBALANCE_PROTOCOL") || !strings.Contains(err.Error(), "eager, cooperative-sticky or consumer") {
		t.Errorf("KAFKA_REBALANCE_PROTOCOL=range: got %v, want an error naming the variable and the three protocols", err)
	}
}
