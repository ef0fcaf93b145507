package harness

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// observeBundle is one payment, committed and published, and a verifier of it.
type observeBundle struct {
	ctx                context.Context
	payments, consumer *pgxpool.Pool
	verifier           *verify.Verifier
	paymentID, eventID uuid.UUID
}

// setupObserve commits one payment (u-42, 1999 EUR), publishes its event to a fresh
// topic of 3 partitions, and connects a verifier to fresh payments and consumer
// databases. The consumer database has no decision yet.
func setupObserve(t *testing.T) observeBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	paymentsURL, consumerURL := testenv.NewDatabase(t, migrations.Payments), testenv.NewDatabase(t, migrations.Antifraud)
	brokers, topic := testenv.KafkaBrokers(t), testenv.NewTopic(t, 3)
	b := observeBundle{ctx: ctx, paymentID: uuid.New(), eventID: uuid.New()}

	v, err := verify.New(ctx, verify.Config{PaymentsDB: paymentsURL, ConsumerDB: consumerURL, Brokers: brokers, Topic: topic, DecisionTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("verify.New: %v", err)
	}
	t.Cleanup(v.Close)
	b.verifier = v
	for _, db := range []struct {
		url  string
		pool **pgxpool.Pool
	}{{paymentsURL, &b.payments}, {consumerURL, &b.consumer}} {
		pool, err := pgxpool.New(ctx, db.url)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(pool.Close)
		*db.pool = pool
	}
	_, err = b.payments.Exec(ctx, `INSERT INTO payments (id, user_id, amount, currency, created_at) VALUES ($1, 'u-42', 1999, 'EUR', now())`, b.paymentID)
	if err != nil {
		t.Fatalf("insert payment: %v", err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("new Kafka client: %v", err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, testenv.PaymentRecord(t, topic, b.paymentID, b.eventID)).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return b
}

// decide records the consumer's decision of the payment, made from event eventID, and
// its running total.
func (b observeBundle) decide(t *testing.T, eventID uuid.UUID) {
	t.Helper()
	_, err := b.consumer.Exec(b.ctx, `
		INSERT INTO decisions (payment_id, event_id, user_id, amount, currency, decision, occurred_at)
		VALUES ($1, $2, 'u-42', 1999, 'EUR', 'approve', now())`, b.paymentID, eventID)
	if err != nil {
		t.Fatalf("insert decision: %v", err)
	}
	_, err = b.consumer.Exec(b.ctx, `INSERT INTO user_totals (user_id, currency, payment_count, amount_total) VALUES ('u-42', 'EUR', 1, 1999)`)
	if err != nil {
		t.Fatalf("insert user_totals: %v", err)
	}
}

// What the verifier reads from real databases and a real topic: the payment's fields,
// its one event id, the event id its decision names.
func TestObserveReadsIdentities(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		decidedFrom  func(b observeBundle) uuid.UUID
		wantMismatch int
	}{
		{"the decision names the topic's event", func(b observeBundle) uuid.UUID { return b.eventID }, 0},
		{"the decision names another event", func(observeBundle) uuid.UUID { return uuid.New() }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupObserve(t)
			b.decide(t, tt.decidedFrom(b))
			obs, err := b.verifier.Observe(b.ctx)
			if err != nil {
				t.Fatalf("Observe: %v", err)
			}
			obs.Accepted = []string{b.paymentID.String()}
			var r verdict.Report
			fillObserved(obs, &r)

			wantSchema := verify.Schema{OutboxEvents: true, OutboxDLQ: true, DLQReplayedAt: true, ConsumerDatabase: true, Decisions: true, DecisionEventIDs: true, UserTotals: true, PaymentLifecycle: true, ConsumerOrder: true, OrderViolations: true}
			if diff := cmp.Diff(wantSchema, r.Schema); diff != "" {
				t.Errorf("schema (-want +got):\n%s", diff)
			}
			type outcome struct {
				Lost, PayloadMismatches, BadKeys, BadHeaders, BadPayloads, SeveralIDs, Mismatch, TotalsMismatched, Partitions int
			}
			got := outcome{r.Lost, r.PayloadMismatches, r.BadKeys, r.BadHeaders, r.BadPayloads, r.PaymentsWithSeveralEventIDs, r.DecisionEventMismatch, r.TotalsMismatchedUsers, r.TopicPartitions}
			want := outcome{Mismatch: tt.wantMismatch, Partitions: 3}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("outcome (-want +got):\n%s\nnotes: %q", diff, r.Notes)
			}
		})
	}
}

// A service without the optional tables, or without a required one, is read without
// an error, and Schema says what is missing, so the verdict can show it.
func TestObserveReportsMissingTables(t *testing.T) {
	t.Parallel()
	b := setupObserve(t)
	b.decide(t, b.eventID)
	for _, change := range []struct {
		db   *pgxpool.Pool
		stmt string
	}{
		{b.payments, `DROP TABLE outbox_dlq`},
		{b.consumer, `ALTER TABLE decisions DROP COLUMN event_id`},
		{b.consumer, `DROP TABLE user_totals`},
	} {
		if _, err := change.db.Exec(b.ctx, change.stmt); err != nil {
			t.Fatalf("%s: %v", change.stmt, err)
		}
	}
	obs, err := b.verifier.Observe(b.ctx)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	want := verify.Schema{OutboxEvents: true, PaymentLifecycle: true, ConsumerDatabase: true, Decisions: true, ConsumerOrder: true, OrderViolations: true}
	if diff := cmp.Diff(want, obs.Schema); diff != "" {
		t.Errorf("schema (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"decisions.event_id", "user_totals"}, obs.Schema.MissingConsumerTables()); diff != "" {
		t.Errorf("missing consumer tables (-want +got):\n%s", diff)
	}
	if obs.DecisionEvents != nil || obs.Decisions[b.paymentID.String()] != 1 {
		t.Errorf("decisions %v, their events %v; want one decision and no event ids", obs.Decisions, obs.DecisionEvents)
	}
}

// A consumer that never decides is a loss the verdict shows, not an error of the run,
// also without the totals table.
func TestObserveUndecidedIsLost(t *testing.T) {
	t.Parallel()
	b := setupObserve(t)
	if _, err := b.consumer.Exec(b.ctx, `DROP TABLE user_totals`); err != nil {
		t.Fatalf("drop user_totals: %v", err)
	}
	obs, err := b.verifier.Observe(b.ctx)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	var r verdict.Report
	fillObserved(obs, &r)
	if r.Lost != 1 || r.LostNoDecision != 1 {
		t.Errorf("lost %d, of which no decision %d; want 1 and 1 (notes %q)", r.Lost, r.LostNoDecision, r.Notes)
	}
}

// A dead letter an operator replayed stays in outbox_dlq as history, with replayed_at
// set, and no longer counts (the poison scenario's "dlq 0 after the replay").
func TestObserveLeavesReplayedDeadLettersOut(t *testing.T) {
	t.Parallel()
	b := setupObserve(t)
	b.decide(t, b.eventID)
	_, err := b.payments.Exec(b.ctx, `
		INSERT INTO outbox_dlq (event_id, event_type, aggregate_id, payload, attempts, last_error, replayed_at)
		VALUES ($1, 'PaymentCreated', 'a', '{}', 5, 'MESSAGE_TOO_LARGE', now()),
		       ($2, 'PaymentCreated', 'b', '{}', 5, 'MESSAGE_TOO_LARGE', NULL)`, uuid.New(), uuid.New())
	if err != nil {
		t.Fatalf("insert dead letters: %v", err)
	}
	obs, err := b.verifier.Observe(b.ctx)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	if obs.DLQ != 1 {
		t.Errorf("DLQ = %d with one dead letter replayed and one not, want 1", obs.DLQ)
	}
}
