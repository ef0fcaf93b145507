package harness

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The sampler reads each count from its real source: two payments, one of them still
// pending in the outbox, three records in the topic, one decision whose event came
// three times, and the API's counters, which drop to zero when the API is "restarted"
// without the totals dropping with them.
func TestSamplerReadsEverySource(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	paymentsURL, consumerURL := testenv.NewDatabase(t, migrations.Payments), testenv.NewDatabase(t, migrations.Antifraud)
	brokers, topic := testenv.KafkaBrokers(t), testenv.NewTopic(t, 3)

	execSQL(t, paymentsURL, `INSERT INTO payments (id, user_id, amount, currency, created_at) VALUES (gen_random_uuid(), 'u-1', 100, 'EUR', now()), (gen_random_uuid(), 'u-2', 200, 'EUR', now())`)
	execSQL(t, paymentsURL, `INSERT INTO outbox_events (id, event_type, aggregate_id, payload) VALUES
		(gen_random_uuid(), 'PaymentCreated', 'a', '{}'),
		(gen_random_uuid(), 'PaymentCreated', 'b', '{}')`)
	execSQL(t, paymentsURL, `WITH moved AS (DELETE FROM outbox_events WHERE aggregate_id = 'a' RETURNING *)
		INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at)
		SELECT id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at FROM moved`)
	paymentID, eventID := uuid.New(), uuid.New()
	execSQL(t, consumerURL, fmt.Sprintf(`INSERT INTO processed_events (event_id, payment_id, topic, partition, "offset", deliveries) VALUES ('%s', '%s', 't', 0, 0, 3)`, eventID, paymentID))
	execSQL(t, consumerURL, fmt.Sprintf(`INSERT INTO decisions (payment_id, event_id, user_id, amount, currency, decision, occurred_at) VALUES ('%s', '%s', 'u-1', 100, 'EUR', 'approve', now())`, paymentID, eventID))

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("new Kafka client: %v", err)
	}
	defer cl.Close()
	for range 3 {
		if err := cl.ProduceSync(ctx, testenv.PaymentRecord(t, topic, uuid.New(), uuid.New())).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	var published, failures atomic.Int64
	published.Store(7)
	failures.Store(2)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE outbox_published_total counter\noutbox_published_total %d\noutbox_publish_failures_total{reason=\"timeout\"} %d\n", published.Load(), failures.Load())
	}))
	defer api.Close()

	rn := &Run{PaymentsDB: paymentsURL, ConsumerDB: consumerURL, Brokers: brokers, Topic: topic, Origin: time.Now(), API: &stack.Process{BaseURL: api.URL}}
	s, err := newSampler(ctx, rn)
	if err != nil {
		t.Fatalf("newSampler: %v", err)
	}
	defer s.closeSources()

	ignoreTime := cmpopts.IgnoreFields(verdict.Sample{}, "AtS")
	want := verdict.Sample{PaymentsCommitted: 2, OutboxPending: 1, Published: 7, PublishFailures: 2, TopicRecords: 3, Decisions: 1, DuplicatesAbsorbed: 2, DualWriteGivenUp: -1}
	if diff := cmp.Diff(want, s.sampleOnce(ctx), ignoreTime); diff != "" {
		t.Errorf("first sample (-want +got):\n%s", diff)
	}
	// A restarted API counts from zero again: the totals must keep what the dead one
	// counted.
	published.Store(3)
	failures.Store(0)
	want.Published, want.PublishFailures = 10, 2
	if diff := cmp.Diff(want, s.sampleOnce(ctx), ignoreTime); diff != "" {
		t.Errorf("sample after a restart (-want +got):\n%s", diff)
	}
	// An API that does not answer keeps its totals; a table that is not there is unknown.
	api.Close()
	execSQL(t, paymentsURL, `DROP TABLE outbox_events CASCADE`)
	want.OutboxPending = -1
	if diff := cmp.Diff(want, s.sampleOnce(ctx), ignoreTime); diff != "" {
		t.Errorf("sample with the API gone (-want +got):\n%s", diff)
	}
}

func execSQL(t *testing.T, dbURL, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// The loop samples until Stop, and Stop returns what it sampled.
func TestSamplerStops(t *testing.T) {
	t.Parallel()
	paymentsURL := testenv.NewDatabase(t, migrations.Payments)
	rn := &Run{PaymentsDB: paymentsURL, Brokers: testenv.KafkaBrokers(t), Topic: testenv.NewTopic(t, 1), Origin: time.Now(), API: &stack.Process{}}
	s, err := startSampler(t.Context(), rn)
	if err != nil {
		t.Fatalf("startSampler: %v", err)
	}
	tl := s.Stop()
	if len(tl.Samples) == 0 || tl.Samples[0].PaymentsCommitted != 0 || tl.Samples[0].Decisions != -1 {
		t.Errorf("samples = %+v, want at least one, with 0 payments and decisions unknown (no consumer database)", tl.Samples)
	}
}

// The end of the sampling is sampled too: what happened between the last tick and
// Stop (the dual write's last failures) is in the timeline.
func TestSamplerSamplesTheEnd(t *testing.T) {
	t.Parallel()
	rn := &Run{PaymentsDB: testenv.NewDatabase(t, migrations.Payments), Brokers: testenv.KafkaBrokers(t), Topic: testenv.NewTopic(t, 1), Origin: time.Now(), API: &stack.Process{}}
	s, err := newSampler(t.Context(), rn)
	if err != nil {
		t.Fatalf("newSampler: %v", err)
	}
	defer s.closeSources()
	stopped, cancel := context.WithCancel(t.Context())
	cancel()
	s.loop(stopped) // returns at once: the first sample, then the last
	if len(s.samples) != 2 {
		t.Errorf("%d samples of a sampling stopped at once, want 2: the first and the last", len(s.samples))
	}
}

func TestTotalCounter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		readings []int
		want     []int
	}{
		{"unknown until the first reading", []int{-1, -1, 4}, []int{-1, -1, 4}},
		{"a missed reading keeps the total", []int{3, -1, 5}, []int{3, 3, 5}},
		{"a restart banks the last reading", []int{3, 8, 1, 2}, []int{3, 8, 9, 10}},
		{"two restarts", []int{5, 0, 4, 1}, []int{5, 5, 9, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var c totalCounter
			var got []int
			for _, r := range tt.readings {
				got = append(got, c.observe(r))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("totals (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPerSecond(t *testing.T) {
	t.Parallel()
	total := func(s verdict.Sample) int { return s.TopicRecords }
	tl := &verdict.Timeline{Samples: []verdict.Sample{
		{AtS: 0, TopicRecords: 0},
		{AtS: 0.5, TopicRecords: 5},
		{AtS: 1.0, TopicRecords: 10},
		{AtS: 1.5, TopicRecords: -1}, // unknown: left out
		{AtS: 2.0, TopicRecords: 10},
		{AtS: 3.0, TopicRecords: 40},
	}}
	want := []verdict.Point{{T: 0.5, V: 10}, {T: 1.0, V: 10}, {T: 2.0, V: 0}, {T: 3.0, V: 30}}
	if diff := cmp.Diff(want, tl.PerSecond(total, 1)); diff != "" {
		t.Errorf("PerSecond (-want +got):\n%s", diff)
	}
}
