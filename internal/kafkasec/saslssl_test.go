package kafkasec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/dscourse/payments-outbox/internal/antifraud"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/cdc"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The relay and the consumer start goroutines; every one must be gone when they return.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRelayAndConsumerOverSASLSSL: a payment event goes from the outbox to an antifraud
// decision through the broker's SASL_SSL listener only: each relay (polling, CDC)
// publishes it with its producer options plus the security options, and the consumer
// reads it with its client options plus the same. The topic is created through DIRECT,
// the one thing that is not under test.
func TestRelayAndConsumerOverSASLSSL(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"poll", "cdc"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			listener := testenv.KafkaSASLSSL(t)
			secure := testenv.SecurityOpts(t, listener.Security)
			topic := testenv.NewTopic(t, 3)
			logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			paymentsURL := testenv.NewDatabase(t, migrations.Payments)
			payments, err := pgxpool.New(ctx, paymentsURL)
			if err != nil {
				t.Fatal(err)
			}
			// A cleanup, not a defer: the CDC relay's cleanup drops its slot through it.
			t.Cleanup(payments.Close)
			p := event.PaymentCreated{PaymentID: uuid.New(), UserID: "u-sasl", Amount: 1999, Currency: "EUR", CreatedAt: time.Now().UTC()}
			stopRelay := startRelay(t, mode, payments, paymentsURL, listener.Brokers, topic, secure, logger.With("component", "relay"))
			insertEvent(ctx, t, payments, p)

			decisions := testenv.NewPool(t, migrations.Antifraud)
			consumerMetrics, err := antifraud.NewMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			consumer, err := antifraud.NewConsumer(decisions, antifraud.Config{
				Brokers: listener.Brokers, Topic: topic, Group: "test-sasl-ssl-" + uuid.NewString(),
				ClientOpts: append(secure, kgo.FetchMaxWait(200*time.Millisecond)),
			}, logger.With("component", "consumer"), consumerMetrics)
			if err != nil {
				t.Fatalf("NewConsumer: %v", err)
			}
			stopConsumer := runUntilCancel(t, consumer.Run)

			var decision string
			testenv.WaitFor(t, 45*time.Second, func() (bool, string) {
				err := decisions.QueryRow(ctx, "SELECT decision FROM decisions WHERE payment_id = $1", p.PaymentID).Scan(&decision)
				if errors.Is(err, pgx.ErrNoRows) {
					return false, "no decision yet for the payment published over SASL_SSL"
				}
				if err != nil {
					t.Fatalf("select decision: %v", err)
				}
				return true, ""
			})
			if decision != "approve" {
				t.Errorf("decision = %s, want approve", decision)
			}
			if err := stopConsumer(); err != nil {
				t.Errorf("consumer.Run = %v, want nil after cancel", err)
			}
			if err := stopRelay(); err != nil {
				t.Errorf("relay.Run = %v, want nil after cancel", err)
			}
		})
	}
}

// startRelay runs the relay of mode with the security options and returns its stop.
// The CDC relay's replication slot is server-wide: it is dropped once the relay stopped.
func startRelay(t *testing.T, mode string, pool *pgxpool.Pool, dbURL string, brokers []string, topic string, secure []kgo.Opt, logger *slog.Logger) func() error {
	t.Helper()
	if mode == "poll" {
		metrics, err := poll.NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		relay, err := poll.NewRelay(pool, poll.Config{
			Brokers: brokers, Topic: topic, ClientOpts: secure, PollInterval: 100 * time.Millisecond,
		}, logger, metrics)
		if err != nil {
			t.Fatalf("poll.NewRelay: %v", err)
		}
		return runUntilCancel(t, relay.Run)
	}
	metrics, err := cdc.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	relay, err := cdc.NewRelay(pool, cdc.Config{
		DatabaseURL: dbURL, Brokers: brokers, Topic: topic, ClientOpts: secure, ReconnectInterval: 100 * time.Millisecond,
	}, logger, metrics)
	if err != nil {
		t.Fatalf("cdc.NewRelay: %v", err)
	}
	stop := runUntilCancel(t, relay.Run)
	slot := cdc.DefaultSlot(dbURL)
	t.Cleanup(func() {
		_ = stop()
		// The walsender of a stopped relay ends a moment after its connection closes.
		testenv.WaitFor(t, 20*time.Second, func() (bool, string) {
			_, err := pool.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
			return err == nil, fmt.Sprintf("drop replication slot %s: %v", slot, err)
		})
	})
	return stop
}

// TestCheckAtStartOverSASLSSL: against the SASL_SSL listener, the right settings pass;
// a wrong password, a CA that did not sign the broker's certificate, and TLS to a
// plaintext listener each stop the start with the cause in words; a broker that does not
// answer only warns, so that the service starts while Kafka is down.
func TestCheckAtStartOverSASLSSL(t *testing.T) {
	t.Parallel()
	listener := testenv.KafkaSASLSSL(t)
	dir := t.TempDir()

	wrongPassword := listener.Security
	wrongPassword.PasswordFile = ""
	wrongPassword.Password = "not-the-password"

	wrongCA := listener.Security
	wrongCA.CAFile = filepath.Join(dir, "other-ca.pem")
	if err := os.WriteFile(wrongCA.CAFile, testenv.UnknownCAPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	// The broker's certificate names 127.0.0.1 and localhost.
	otherName := listener.Security
	otherName.ServerName = "kafka.example.com"
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := closed.Addr().String()
	closed.Close()

	tests := []struct {
		name    string
		sec     kafkasec.Config
		brokers []string
		wantErr string // a part of the error; empty for none
		wantLog string // a part of the log
	}{
		{name: "right settings", sec: listener.Security, brokers: listener.Brokers, wantLog: "Kafka accepts the security settings"},
		{name: "wrong password", sec: wrongPassword, brokers: listener.Brokers, wantErr: "SASL_AUTHENTICATION_FAILED"},
		{name: "wrong CA", sec: wrongCA, brokers: listener.Brokers, wantErr: "x509: certificate signed by unknown authority"},
		{name: "a server name the certificate does not carry", sec: otherName, brokers: listener.Brokers, wantErr: "x509: certificate is valid for"},
		{name: "TLS to the plaintext listener", sec: listener.Security, brokers: testenv.KafkaBrokers(t), wantErr: "using TLS when the broker is not expecting it"},
		{name: "no broker", sec: listener.Security, brokers: []string{nobody}, wantLog: "Kafka did not answer at start"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs strings.Builder
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			err := tt.sec.CheckAtStart(context.Background(), tt.brokers, testenv.SecurityOpts(t, tt.sec), logger)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckAtStart: %v, want nil", err)
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CheckAtStart: err %v, want one containing %q; log:\n%s", err, tt.wantErr, logs.String())
				}
				if !kafkasec.Misconfigured(err) {
					t.Errorf("Misconfigured(%v) = false, want true", err)
				}
				if !strings.Contains(err.Error(), "Kafka refuses the security settings (TLS (CA ") {
					t.Errorf("CheckAtStart: %q, want it to describe the settings tried", err)
				}
			}
			if !strings.Contains(logs.String(), tt.wantLog) {
				t.Errorf("log %q, want it to contain %q", logs.String(), tt.wantLog)
			}
			if strings.Contains(logs.String()+fmt.Sprint(err), "not-the-password") {
				t.Errorf("the password is printed: %v\n%s", err, logs.String())
			}
		})
	}
}

// insertEvent writes p's PaymentCreated event into the outbox, as the API does.
func insertEvent(ctx context.Context, t *testing.T, pool *pgxpool.Pool, p event.PaymentCreated) {
	t.Helper()
	payload, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := outbox.Insert(ctx, tx, outbox.Message{
		ID: uuid.New(), Type: event.TypePaymentCreated, AggregateID: p.PaymentID.String(), Payload: payload, OccurredAt: p.CreatedAt,
	}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// runUntilCancel runs run in a goroutine and returns the function that cancels it and
// returns what it returned; the test's end calls it too.
func runUntilCancel(t *testing.T, run func(context.Context) error) func() error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var result error
	stopped := false
	stop := func() error {
		if !stopped {
			cancel()
			result, stopped = <-done, true
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
