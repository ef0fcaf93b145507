package poll

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/outboxtest"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.IgnoreToxiproxyGoroutines())
}

// testBundle is what most relay tests start from: a fresh migrated database, a fresh
// topic on the real broker, and a relay config with short timings.
type testBundle struct {
	pool    *pgxpool.Pool
	brokers []string
	topic   string
	cfg     Config
	metrics *Metrics
	// reg holds metrics, for the tests that read them.
	reg    *prometheus.Registry
	logger *slog.Logger
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.NewTopic(t, 3)
	reg := prometheus.NewRegistry()
	return &testBundle{
		pool:    testenv.NewPool(t, migrations.Payments),
		brokers: brokers,
		topic:   topic,
		cfg: Config{
			Brokers:           brokers,
			Topic:             topic,
			Workers:           2,
			PublishTimeout:    time.Second,
			QueryTimeout:      time.Second,
			Lease:             3 * time.Second,
			PollInterval:      100 * time.Millisecond,
			RetryBase:         10 * time.Millisecond,
			RetryMax:          50 * time.Millisecond,
			OutageBackoffBase: 50 * time.Millisecond,
			OutageBackoffMax:  500 * time.Millisecond,
			StatsInterval:     100 * time.Millisecond,
			ShutdownTimeout:   2 * time.Second,
		},
		metrics: newTestMetrics(t, reg),
		reg:     reg,
		logger:  outboxtest.Logger(t),
	}
}

// newTestMetrics returns metrics on reg, a registry of the test's own, so parallel tests
// do not share counters.
func newTestMetrics(t *testing.T, reg *prometheus.Registry) *Metrics {
	t.Helper()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("NewMetrics: %v", err)
	}
	return m
}

func (b *testBundle) newRelay(t *testing.T) *Relay {
	t.Helper()
	r, err := NewRelay(b.pool, b.cfg, b.logger, b.metrics)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	return r
}

// startRelay runs r until the test ends, and checks that Run returns.
func startRelay(t *testing.T, r *Relay) {
	t.Helper()
	outboxtest.Run(t, r.Run)
}

// testEvent is the payload of the events the tests publish.
type testEvent struct {
	Aggregate string `json:"aggregate"`
	N         int    `json:"n"`
	Padding   string `json:"padding,omitempty"`
}

func newMessage(t *testing.T, aggregate string, n int) outbox.Message {
	t.Helper()
	payload, err := json.Marshal(testEvent{Aggregate: aggregate, N: n})
	if err != nil {
		t.Fatal(err)
	}
	return outbox.Message{ID: uuid.New(), Type: "TestEvent", AggregateID: aggregate, Payload: payload, OccurredAt: time.Now()}
}

// insert commits each message in a transaction of its own, as the API does.
func (b *testBundle) insert(t *testing.T, msgs ...outbox.Message) {
	t.Helper()
	outboxtest.Insert(t, b.pool, msgs...)
}

// consume reads the test topic from the start until it holds want records or the
// deadline passes, and returns what it read.
func (b *testBundle) consume(t *testing.T, want int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	return testenv.ConsumeFromStart(t, b.brokers, b.topic, want, timeout)
}

// kafkaAdmin returns an admin client of the test broker, closed when the test ends.
func (b *testBundle) kafkaAdmin(t *testing.T) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		t.Fatalf("new Kafka admin client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// topicEnd returns the number of records in the topic (sum of partition end offsets).
func (b *testBundle) topicEnd(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := b.kafkaAdmin(t).ListEndOffsets(ctx, b.topic)
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	return total
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// statusCounts returns how many events have each status: pending and failed in
// outbox_events, published in outbox_published.
func (b *testBundle) statusCounts(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT status, count(*) FROM outbox_events GROUP BY status
		UNION ALL
		SELECT 'published', count(*) FROM outbox_published HAVING count(*) > 0`)
	if err != nil {
		t.Fatal(err)
	}
	counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct {
		status string
		n      int
	}, error) {
		var s struct {
			status string
			n      int
		}
		return s, row.Scan(&s.status, &s.n)
	})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, c := range counts {
		m[c.status] = c.n
	}
	return m
}

func (b *testBundle) waitAllPublished(t *testing.T, want int, timeout time.Duration) {
	t.Helper()
	testenv.WaitFor(t, timeout, func() (bool, string) {
		if got := b.statusCounts(t); got["published"] != want || len(got) != 1 {
			return false, fmt.Sprintf("outbox statuses %v, want all %d published", got, want)
		}
		return true, ""
	})
}

// lockedRows returns how many outbox rows a batch's transaction holds: the rows a
// claim of its own cannot lock. The claim here is rolled back at once.
func (b *testBundle) lockedRows(t *testing.T) int {
	t.Helper()
	var all, free int
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events`).Scan(&all); err != nil {
			return err
		}
		return tx.QueryRow(context.Background(),
			`SELECT count(*) FROM (SELECT 1 FROM outbox_events FOR UPDATE SKIP LOCKED) AS free`).Scan(&free)
	})
	if err != nil {
		t.Fatal(err)
	}
	return all - free
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	return outboxtest.Count(t, b.pool, query, args...)
}

// failures is outbox_publish_failures_total for reason, transport or rejected.
func (b *testBundle) failures(t *testing.T, reason string) float64 {
	t.Helper()
	return b.metric(t, "outbox_publish_failures_total", "reason", reason)
}

// metric is the value of the counter or gauge name in the test's registry, of the
// series with the label pairs labels (name, value, ...), or 0 when there is none.
func (b *testBundle) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return outboxtest.Metric(t, b.reg, name, labels...)
}

// webhookAlert is the body the alert webhook receives, as the receiver reads it.
type webhookAlert struct {
	RoutingKey  string `json:"routing_key"`
	EventAction string `json:"event_action"`
	DedupKey    string `json:"dedup_key"`
	Payload     struct {
		Severity      string            `json:"severity"`
		CustomDetails outbox.DeadLetter `json:"custom_details"`
	} `json:"payload"`
}

// newProducer returns a Kafka client configured like r's own, closed when the test
// ends, for tests that drive the relay's steps by hand.
func newProducer(t *testing.T, r *Relay) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(r.clientOpts()...)
	if err != nil {
		t.Fatalf("new producer: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// startWorkers runs r's workers over own and alone instead of Kafka clients until the
// test ends, every worker with the same two, and checks that they stop.
func startWorkers(t *testing.T, r *Relay, own, alone delivery.Producer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		workers := make([]worker, r.cfg.Workers)
		for i := range workers {
			workers[i] = worker{own: own, alone: alone}
		}
		r.runWorkers(ctx, workers)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("workers did not stop 30s after their context ended")
		}
	})
}

// publishedOutOfOrder counts the pairs of published events of one aggregate that the
// broker wrote in the opposite order of their commits (seq). It asks the broker, not
// published_at: that is when the marking transaction began, and a batch may begin
// before another one's commit lets it claim the next event of an aggregate.
func (b *testBundle) publishedOutOfOrder(t *testing.T, broker *fakeProducer) int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		`SELECT id::text, aggregate_id FROM outbox_published ORDER BY aggregate_id, seq`)
	if err != nil {
		t.Fatalf("read published events: %v", err)
	}
	type published struct{ ID, Aggregate string }
	events, err := pgx.CollectRows(rows, pgx.RowToStructByPos[published])
	if err != nil {
		t.Fatalf("read published events: %v", err)
	}
	written := broker.firstAcks()
	outOfOrder := 0
	for i, e := range events {
		for _, later := range events[i+1:] {
			if later.Aggregate != e.Aggregate {
				break
			}
			earlierAt, ok1 := written[e.ID]
			laterAt, ok2 := written[later.ID]
			if !ok1 || !ok2 || laterAt < earlierAt {
				outOfOrder++
			}
		}
	}
	return outOfOrder
}
