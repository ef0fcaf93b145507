package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The consumer on a multi-host DATABASE_URL, through the loss of its primary and the
// promotion of the standby: an event produced after the promotion is decided on the
// new primary without a restart, and /metrics counts one change of primary. The
// servers are the test's own (testenv.NewPrivateStandby).
func TestRunFollowsAPromotedStandby(t *testing.T) {
	t.Parallel()
	primary := testenv.NewPrivatePostgres(t)
	standby := testenv.NewPrivateStandby(t, primary)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adminURL, err := devstack.CreateDatabase(ctx, primary.URL, "antifraud")
	if err != nil {
		t.Fatal(err)
	}
	if err := devstack.MigrateDatabase(ctx, adminURL, migrations.Antifraud); err != nil {
		t.Fatal(err)
	}
	dbURL := testenv.MultiHostURL("antifraud", primary, standby)
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.NewTopic(t, 3)
	env := map[string]string{
		"DATABASE_URL":  dbURL,
		"HTTP_ADDR":     "127.0.0.1:0",
		"KAFKA_BROKERS": strings.Join(brokers, ","),
		"KAFKA_TOPIC":   topic,
		"KAFKA_GROUP":   "test-consumer-" + uuid.NewString(),
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	defer producer.Close()
	produce := func() uuid.UUID {
		p := event.PaymentCreated{PaymentID: uuid.New(), UserID: "u-42", Amount: 1999, Currency: "EUR", CreatedAt: time.Now().UTC()}
		payload, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		envelope := event.Envelope{ID: uuid.New(), Type: event.TypePaymentCreated, Key: p.PaymentID.String(), OccurredAt: p.CreatedAt, Payload: payload}
		if err := producer.ProduceSync(ctx, envelope.Record("", time.Now())).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		return p.PaymentID
	}

	runCtx, stop := context.WithCancel(ctx)
	stdout := new(lineBuffer)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, []string{"consumer"}, func(k string) string { return env[k] }, stdout) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run = %v, want nil after cancel", err)
		}
	}()
	base := "http://" + waitForListening(t, stdout, done)
	waitForMetric := func(want string) {
		t.Helper()
		testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
			_, body := httpGet(t, base+"/metrics")
			return strings.Contains(body, "\n"+want+"\n"), want + " is not in /metrics yet"
		})
	}
	produce()
	waitForMetric("antifraud_processed_total 1")

	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	after := produce()
	waitForMetric("antifraud_processed_total 2")
	waitForMetric("postgres_primary_changes_total 1")

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var decisions int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM decisions`).Scan(&decisions); err != nil {
		t.Fatal(err)
	}
	var decided bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM decisions WHERE payment_id = $1)`, after).Scan(&decided); err != nil {
		t.Fatal(err)
	}
	if decisions != 2 || !decided {
		t.Errorf("the new primary has %d decisions, that of the payment sent after the promotion: %t; want 2 and true", decisions, decided)
	}
}
