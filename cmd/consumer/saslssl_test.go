package main

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The consumer configured by the KAFKA_TLS_* and KAFKA_SASL_* variables alone reads the
// broker's SASL_SSL listener: an event published there is decided.
func TestRunConsumesOverSASLSSL(t *testing.T) {
	t.Parallel()
	listener := testenv.KafkaSASLSSL(t)
	topic := testenv.NewTopic(t, 1)
	env := maps.Clone(listener.Env)
	maps.Copy(env, map[string]string{
		"DATABASE_URL": testenv.NewDatabase(t, migrations.Antifraud),
		"HTTP_ADDR":    "127.0.0.1:0",
		"KAFKA_TOPIC":  topic,
		"KAFKA_GROUP":  "test-consumer-sasl-" + uuid.NewString(),
	})

	producer, err := kgo.NewClient(append(testenv.SecurityOpts(t, listener.Security),
		kgo.SeedBrokers(listener.Brokers...), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	defer producer.Close()
	p := event.PaymentCreated{PaymentID: uuid.New(), UserID: "u-sasl", Amount: 1999, Currency: "EUR", CreatedAt: time.Now().UTC()}
	payload, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	envelope := event.Envelope{ID: uuid.New(), Type: event.TypePaymentCreated, Key: p.PaymentID.String(), OccurredAt: p.CreatedAt, Payload: payload}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := producer.ProduceSync(ctx, envelope.Record("", time.Now())).FirstErr(); err != nil {
		t.Fatalf("produce over SASL_SSL: %v", err)
	}

	stdout := new(lineBuffer)
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"consumer"}, func(k string) string { return env[k] }, stdout) }()
	base := "http://" + waitForListening(t, stdout, done)
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		_, body := httpGet(t, base+"/metrics")
		return strings.Contains(body, "antifraud_processed_total 1\n"), "antifraud_processed_total is not 1 yet"
	})
	if !strings.Contains(stdout.String(), "Kafka accepts the security settings") {
		t.Errorf("no start-up line saying the security settings were accepted:\n%s", stdout)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v, want nil after cancel", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run did not return within 60s of cancel")
	}
}

// A password the broker refuses stops the consumer at start, with the broker's words,
// before it opens its database.
func TestRunStopsOnARefusedKafkaPassword(t *testing.T) {
	t.Parallel()
	listener := testenv.KafkaSASLSSL(t)
	env := maps.Clone(listener.Env)
	delete(env, "KAFKA_SASL_PASSWORD_FILE")
	env["KAFKA_SASL_PASSWORD"] = "not-the-password"
	env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:1/antifraud?sslmode=disable&connect_timeout=1"
	err := run(context.Background(), []string{"consumer"}, func(k string) string { return env[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
		t.Fatalf("run with a wrong KAFKA_SASL_PASSWORD = %v, want an error saying SASL_AUTHENTICATION_FAILED", err)
	}
	if strings.Contains(err.Error(), "not-the-password") {
		t.Errorf("the error prints the password: %v", err)
	}
}
