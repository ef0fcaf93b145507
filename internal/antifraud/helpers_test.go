package antifraud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A bundle is what a consumer test works with: a fresh antifraud database, a fresh topic,
// a producer to write to it, and a unique group.
type bundle struct {
	pool     *pgxpool.Pool
	brokers  []string
	topic    string
	group    string
	producer *kgo.Client
	admin    *kadm.Client
}

func setup(t *testing.T, partitions int32) *bundle {
	t.Helper()
	b := &bundle{
		pool:    testenv.NewPool(t, migrations.Antifraud),
		brokers: testenv.KafkaBrokers(t),
		topic:   testenv.NewTopic(t, partitions),
		group:   "test-antifraud-" + uuid.NewString(),
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.DefaultProduceTopic(b.topic))
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	t.Cleanup(producer.Close)
	b.producer = producer
	b.admin = kadm.NewClient(producer)
	return b
}

// config is the consumer configuration of the bundle's topic and group.
func (b *bundle) config() Config {
	return Config{
		Brokers: b.brokers,
		Topic:   b.topic,
		Group:   b.group,
		// Tests poll small batches, so that a stream spans many polls and rebalances.
		MaxPollRecords: 20,
		ClientOpts:     []kgo.Opt{kgo.FetchMaxWait(200 * time.Millisecond)},
	}
}

// A running consumer started by start.
type running struct {
	metrics *Metrics
	cancel  context.CancelFunc
	done    chan error
}

// start runs a consumer until stop or the end of the test.
func (b *bundle) start(t *testing.T, cfg Config) *running {
	t.Helper()
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("NewMetrics: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := NewConsumer(b.pool, cfg, logger, metrics)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{metrics: metrics, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the consumer and returns what Run returned. It may be called many times.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the next call
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("consumer did not stop within 60s")
		return nil
	}
}

// wait returns what Run returned once it returns by itself, within the timeout.
func (r *running) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(timeout):
		t.Fatalf("consumer still running after %s", timeout)
		return nil
	}
}

// testWriter sends the consumer's logs to the test log, shown when the test fails.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// newPayment returns a valid payment event of the user.
func newPayment(userID string, amount int64, at time.Time) event.PaymentCreated {
	return event.PaymentCreated{PaymentID: uuid.New(), UserID: userID, Amount: amount, Currency: "EUR", CreatedAt: at}
}

// eventRecord is the record the relay would publish for p, with event id id.
func eventRecord(t *testing.T, id uuid.UUID, p event.PaymentCreated) *kgo.Record {
	t.Helper()
	value, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("encode payment: %v", err)
	}
	envelope := event.Envelope{ID: id, Type: event.TypePaymentCreated, Key: p.PaymentID.String(), OccurredAt: p.CreatedAt, Payload: value}
	return envelope.Record("", time.Now())
}

// produce writes the records in order, each acknowledged before the next is sent.
func (b *bundle) produce(t *testing.T, records ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range records {
		if err := b.producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// count runs a query returning one integer.
func (b *bundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// committed returns the group's committed offset of each partition of the topic.
func (b *bundle) committed(t *testing.T) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.admin.FetchOffsets(ctx, b.group)
	if err != nil {
		t.Fatalf("fetch offsets of group %s: %v", b.group, err)
	}
	out := map[int32]int64{}
	for _, o := range resp[b.topic] {
		if o.Err != nil {
			t.Fatalf("offset of partition %d: %v", o.Partition, o.Err)
		}
		out[o.Partition] = o.At
	}
	return out
}

var errTestCrash = errors.New("test crash")

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func mustMetrics(t testing.TB) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("NewMetrics: %v", err)
	}
	return m
}

// waitForMembers waits until the group is stable with n members that each own partitions:
// the rebalance is over.
func (b *bundle) waitForMembers(t *testing.T, n int) {
	t.Helper()
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		groups, err := b.admin.DescribeGroups(ctx, b.group)
		if err != nil {
			return false, fmt.Sprintf("describe group: %v", err)
		}
		g := groups[b.group]
		owning := 0
		for _, m := range g.Members {
			if c, ok := m.Assigned.AsConsumer(); ok && len(c.Topics) > 0 && len(c.Topics[0].Partitions) > 0 {
				owning++
			}
		}
		return g.State == "Stable" && owning == n, fmt.Sprintf("group %s with %d members owning partitions", g.State, owning)
	})
}
