package cdc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/outboxtest"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.IgnoreToxiproxyGoroutines())
}

// testBundle is what the CDC relay's tests start from: a fresh migrated database (so a
// slot name of its own, DefaultSlot), a fresh topic on the real broker, and a config
// with short timings.
type testBundle struct {
	pool    *pgxpool.Pool
	dbURL   string
	brokers []string
	topic   string
	cfg     Config
	logger  *slog.Logger
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupOn(t, testenv.NewDatabase(t, migrations.Payments))
}

// setupOn is setup on a migrated database of the caller's (one on a server of the
// test's own, which the test may restart).
func setupOn(t *testing.T, dbURL string) *testBundle {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.NewTopic(t, 3)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	b := &testBundle{
		pool: pool, dbURL: dbURL, brokers: brokers, topic: topic,
		cfg: Config{
			DatabaseURL:       dbURL,
			Brokers:           brokers,
			Topic:             topic,
			PublishTimeout:    time.Second,
			QueryTimeout:      2 * time.Second,
			StatusInterval:    500 * time.Millisecond,
			RetryBase:         10 * time.Millisecond,
			RetryMax:          50 * time.Millisecond,
			OutageBackoffBase: 50 * time.Millisecond,
			OutageBackoffMax:  300 * time.Millisecond,
			ReconnectInterval: 100 * time.Millisecond,
			StatsInterval:     100 * time.Millisecond,
		},
		logger: outboxtest.Logger(t),
	}
	// Registered after the database's cleanup, so it runs before it (and after every
	// relay of the test has stopped, as those register later): the slot is server-wide
	// and would outlive the database, holding WAL for every other test.
	slot := DefaultSlot(dbURL)
	t.Cleanup(func() {
		dropSlot(t, pool, slot)
		pool.Close()
	})
	return b
}

// dropSlot drops a replication slot once no walsender holds it any more (a stopped
// relay's server side ends a moment after its connection closes).
func dropSlot(t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := pool.Exec(context.Background(),
			`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("drop replication slot %s: %v (drop it by hand: SELECT pg_drop_replication_slot('%s'))", slot, err, slot)
			return
		}
		time.Sleep(100 * time.Millisecond) // cleanup of a server-side process; no signal to wait on
	}
}

// testRelay is a running relay and its metrics.
type testRelay struct {
	relay *Relay
	// fake is the producer the relay was started on, if it was a fake.
	fake    *fakeProducer
	metrics *Metrics
	reg     *prometheus.Registry
	stop    func()
}

// start runs a relay with b.cfg until stop is called or the test ends.
func (b *testBundle) start(t *testing.T) *testRelay {
	t.Helper()
	return b.startOn(t, nil)
}

// startOn is start with the fake broker p in place of the relay's Kafka client, or
// with the relay's own client when p is nil.
func (b *testBundle) startOn(t *testing.T, p *fakeProducer) *testRelay {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRelay(b.pool, b.cfg, b.logger, m)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	run := r.Run
	if p != nil {
		run = func(ctx context.Context) error {
			r.run(ctx, p)
			return nil
		}
	}
	stop := outboxtest.Run(t, run)
	return &testRelay{relay: r, fake: p, metrics: m, reg: reg, stop: stop}
}

func (r *testRelay) streaming() bool { return testutil.ToFloat64(r.metrics.streaming) == 1 }

// insert commits n events, each in a transaction of its own as the API does, with
// aggregate ids prefix-0, prefix-1, ..., and returns their ids in commit order.
func (b *testBundle) insert(t *testing.T, prefix string, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	msgs := make([]outbox.Message, n)
	for i := range n {
		ids[i] = uuid.New()
		payload, _ := json.Marshal(map[string]any{"aggregate": prefix, "n": i})
		msgs[i] = outbox.Message{ID: ids[i], Type: "TestEvent", AggregateID: fmt.Sprintf("%s-%d", prefix, i),
			Payload: payload, OccurredAt: time.Now()}
	}
	outboxtest.Insert(t, b.pool, msgs...)
	return ids
}

// consume reads the topic from the start until it holds at least want records or the
// deadline passes.
func (b *testBundle) consume(t *testing.T, want int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	return testenv.ConsumeFromStart(t, b.brokers, b.topic, want, timeout)
}

// eventIDs returns the X-Event-Id of each record, counting repeats.
func eventIDs(records []*kgo.Record) map[string]int {
	out := map[string]int{}
	for _, r := range records {
		for _, h := range r.Headers {
			if h.Key == "X-Event-Id" {
				out[string(h.Value)]++
			}
		}
	}
	return out
}

func (b *testBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	return outboxtest.Count(t, b.pool, query, args...)
}

// waitPublished waits until want rows are published. The timeouts the tests pass are
// generous: creating a slot waits for every transaction running on the server to end,
// and the server is shared.
func (b *testBundle) waitPublished(t *testing.T, want int, timeout time.Duration) {
	t.Helper()
	testenv.WaitFor(t, timeout, func() (bool, string) {
		got := b.count(t, `SELECT count(*) FROM outbox_published`)
		return got == want, fmt.Sprintf("%d rows published, want %d", got, want)
	})
}

// confirmedLSN returns the slot's confirmed_flush_lsn as a number (0 when unset).
func (b *testBundle) confirmedLSN(t *testing.T) int64 {
	t.Helper()
	return int64(b.count(t, `SELECT coalesce((SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint
		FROM pg_replication_slots WHERE slot_name = $1), 0)`, DefaultSlot(b.dbURL)))
}

func testutilGauge(m *Metrics) float64 { return testutil.ToFloat64(m.walRetained) }

// metric returns the value of the series name (with label reason=reason, if given) in
// the relay's registry, 0 when absent.
func (r *testRelay) metric(t *testing.T, name, reason string) float64 {
	t.Helper()
	if reason == "" {
		return outboxtest.Metric(t, r.reg, name)
	}
	return outboxtest.Metric(t, r.reg, name, "reason", reason)
}

// newTestMetrics is a relay's metrics on a registry of their own, for tests that call
// the relay's methods without running it.
func newTestMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}
