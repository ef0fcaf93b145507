package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// run starts goroutines (the HTTP server, the Kafka client); every one must be gone
// when it returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The whole program, in-process, on port 0: the way an operator would use it.
func TestRunConsumesAndShutsDownCleanly(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t, migrations.Antifraud)
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.NewTopic(t, 3)
	group := "test-consumer-" + uuid.NewString()
	env := map[string]string{
		"DATABASE_URL":  dbURL,
		"HTTP_ADDR":     "127.0.0.1:0",
		"KAFKA_BROKERS": strings.Join(brokers, ","),
		"KAFKA_TOPIC":   topic,
		"KAFKA_GROUP":   group,
	}

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	defer producer.Close()
	p := event.PaymentCreated{PaymentID: uuid.New(), UserID: "u-42", Amount: 1999, Currency: "EUR", CreatedAt: time.Now().UTC()}
	payload, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("encode event: %v", err)
	}
	eventID := uuid.New()
	envelope := event.Envelope{ID: eventID, Type: event.TypePaymentCreated, Key: p.PaymentID.String(), OccurredAt: p.CreatedAt, Payload: payload}
	record := envelope.Record("", time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := producer.ProduceSync(ctx, record).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	stdout := new(lineBuffer)
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"consumer"}, func(k string) string { return env[k] }, stdout) }()
	base := "http://" + waitForListening(t, stdout, done)

	if status, body := httpGet(t, base+"/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz: status = %d, want 200; body %s", status, body)
	}
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		_, body := httpGet(t, base+"/metrics")
		return strings.Contains(body, "antifraud_processed_total 1\n"), "antifraud_processed_total is not 1 yet"
	})
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect to %s: %v", dbURL, err)
	}
	defer conn.Close(context.Background())
	var gotEventID uuid.UUID
	var decision string
	if err := conn.QueryRow(ctx, "SELECT event_id, decision FROM decisions WHERE payment_id = $1", p.PaymentID).Scan(&gotEventID, &decision); err != nil {
		t.Fatalf("select decision: %v", err)
	}
	if gotEventID != eventID || decision != "approve" {
		t.Errorf("decision = (%s, %s), want (%s, approve)", gotEventID, decision, eventID)
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

	// A clean shutdown committed the processed offset and left the group.
	admCtx, admCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer admCancel()
	adm := kadm.NewClient(producer)
	offsets, err := adm.FetchOffsets(admCtx, group)
	if err != nil {
		t.Fatalf("fetch offsets: %v", err)
	}
	var committed int64
	for _, o := range offsets[topic] {
		committed += o.At
	}
	if committed != 1 {
		t.Errorf("committed offsets sum to %d, want 1 (the one record)", committed)
	}
	groups, err := adm.DescribeGroups(admCtx, group)
	if err != nil {
		t.Fatalf("describe group: %v", err)
	}
	if n := len(groups[group].Members); n != 0 {
		t.Errorf("group has %d members after shutdown, want 0", n)
	}
}

func TestMigrateSubcommand(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t, migrations.Antifraud)
	// Twice: migrating an up-to-date database is a no-op.
	for range 2 {
		err := run(context.Background(), []string{"consumer", "migrate", "--database-url", dbURL}, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatalf("consumer migrate = %v, want nil", err)
		}
	}
}

// lineBuffer collects run's log output; safe for the writer and the test to share.
type lineBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lineBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitForListening reads the "listening" log line and returns the bound address.
func waitForListening(t *testing.T, logs *lineBuffer, done <-chan error) string {
	t.Helper()
	var addr string
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("run returned before listening: %v\n%s", err, logs)
		default:
		}
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
				addr = line.Addr
				return true, ""
			}
		}
		return false, "no listening line in the logs:\n" + logs.String()
	})
	return addr
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return res.StatusCode, string(body)
}
