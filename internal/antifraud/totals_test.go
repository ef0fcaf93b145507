package antifraud

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The running totals are the consumer's one effect that a redelivery would change: these
// tests are the proof that dedup protects it.

// TestTotalsExactAfterRedeliveryAcrossBatches delivers one event three times through
// Kafka, the last two after the first was committed: the totals count it once.
func TestTotalsExactAfterRedeliveryAcrossBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	b.start(t, b.config())

	id := uuid.New()
	p := newPayment("u-1", 1999, time.Now())
	other := newPayment("u-1", 500, time.Now())
	b.produce(t, eventRecord(t, id, p), eventRecord(t, uuid.New(), other))
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, "SELECT count(*) FROM decisions")
		return n == 2, fmt.Sprintf("%d of 2 decisions", n)
	})
	b.produce(t, eventRecord(t, id, p), eventRecord(t, id, p))
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, "SELECT deliveries FROM processed_events WHERE event_id = $1", id)
		return n == 3, fmt.Sprintf("deliveries = %d", n)
	})

	want := map[totalKey]Total{{"u-1", "EUR"}: {Payments: 2, Amount: 2499}}
	if diff := cmp.Diff(want, b.totals(t), cmp.AllowUnexported(totalKey{})); diff != "" {
		t.Errorf("user totals after 3 deliveries mismatch (-want +got):\n%s", diff)
	}
}

// TestTotalsExactAfterRedeliveryWithinBatch sends three copies of one event in one batch,
// then the same batch again, as after a crash before the offset commit.
func TestTotalsExactAfterRedeliveryWithinBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	c := b.newConsumer(t, b.config())
	id := uuid.New()
	p := newPayment("u-1", 1999, time.Now())
	usd := newPayment("u-1", 700, time.Now())
	usd.Currency = "USD"
	records := b.positioned(eventRecord(t, id, p), eventRecord(t, id, p), eventRecord(t, uuid.New(), usd), eventRecord(t, id, p))

	want := map[totalKey]Total{{"u-1", "EUR"}: {Payments: 1, Amount: 1999}, {"u-1", "USD"}: {Payments: 1, Amount: 700}}
	for _, attempt := range []string{"first", "second"} {
		if _, err := c.processBatch(context.Background(), records); err != nil {
			t.Fatalf("%s processBatch: %v", attempt, err)
		}
		if diff := cmp.Diff(want, b.totals(t), cmp.AllowUnexported(totalKey{})); diff != "" {
			t.Errorf("user totals after the %s batch mismatch (-want +got):\n%s", attempt, diff)
		}
	}
}

// TestFailedBatchRollsBackTotals makes the batch's commit fail, after every statement ran:
// the totals roll back with the dedup rows and decisions, so the retry counts each
// payment once.
func TestFailedBatchRollsBackTotals(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	c := b.newConsumer(t, b.config())
	ctx := context.Background()
	// A deferred constraint trigger runs at COMMIT, so the failure comes after the totals
	// were updated in the transaction.
	_, err := b.pool.Exec(ctx, `
		CREATE FUNCTION fail_commit() RETURNS trigger LANGUAGE plpgsql
		AS $$ BEGIN RAISE EXCEPTION 'injected commit failure'; END $$;
		CREATE CONSTRAINT TRIGGER fail_commit AFTER INSERT ON processed_events
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_commit();`)
	if err != nil {
		t.Fatalf("create failing trigger: %v", err)
	}
	records := b.positioned(
		eventRecord(t, uuid.New(), newPayment("u-1", 1000, time.Now())),
		eventRecord(t, uuid.New(), newPayment("u-1", 234, time.Now())),
	)

	if _, err := c.processBatch(ctx, records); err == nil {
		t.Fatal("processBatch with a failing commit = nil error, want the injected failure")
	}
	if got := b.totals(t); len(got) != 0 {
		t.Errorf("user totals after the failed batch = %+v, want none", got)
	}
	for _, table := range []string{"decisions", "processed_events"} {
		if n := b.count(t, "SELECT count(*) FROM "+table); n != 0 {
			t.Errorf("%s after the failed batch: %d rows, want 0", table, n)
		}
	}

	if _, err := b.pool.Exec(ctx, `DROP TRIGGER fail_commit ON processed_events`); err != nil {
		t.Fatalf("drop failing trigger: %v", err)
	}
	if _, err := c.processBatch(ctx, records); err != nil {
		t.Fatalf("processBatch retried: %v", err)
	}
	want := map[totalKey]Total{{"u-1", "EUR"}: {Payments: 2, Amount: 1234}}
	if diff := cmp.Diff(want, b.totals(t), cmp.AllowUnexported(totalKey{})); diff != "" {
		t.Errorf("user totals after the retry mismatch (-want +got):\n%s", diff)
	}
}

// TestTotalRuleReadsTotals checks that the total rule sees what earlier batches committed
// and what comes earlier in the same batch, per currency, and that a redelivery adds
// nothing to it.
func TestTotalRuleReadsTotals(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	cfg := b.config()
	cfg.Rules = Rules{TotalReviewAmount: 5000}
	c := b.newConsumer(t, cfg)
	batch := func(records ...*kgo.Record) {
		t.Helper()
		if _, err := c.processBatch(context.Background(), b.positioned(records...)); err != nil {
			t.Fatalf("processBatch: %v", err)
		}
	}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	first := newPayment("u-t", 3000, at)
	firstID := uuid.New()
	second, third := newPayment("u-t", 2000, at.Add(time.Minute)), newPayment("u-t", 1, at.Add(2*time.Minute))
	dollars := newPayment("u-t", 3000, at.Add(time.Minute))
	dollars.Currency = "USD"

	batch(eventRecord(t, firstID, first))
	// A redelivery of the first payment must not count: the second one takes the total to
	// 5000 exactly, the third one above it.
	batch(eventRecord(t, firstID, first))
	batch(eventRecord(t, uuid.New(), second), eventRecord(t, uuid.New(), dollars), eventRecord(t, uuid.New(), third))

	got := map[string]string{}
	for name, p := range map[string]event.PaymentCreated{"first": first, "second": second, "third": third, "dollars": dollars} {
		got[name] = b.verdict(t, p)
	}
	want := map[string]string{"first": "approve", "second": "approve", "third": "review", "dollars": "approve"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts mismatch (-want +got):\n%s", diff)
	}
}

// newConsumer returns a consumer whose batches the test drives itself with processBatch.
func (b *bundle) newConsumer(t *testing.T, cfg Config) *Consumer {
	t.Helper()
	c, err := NewConsumer(b.pool, cfg, discardLogger(), mustMetrics(t))
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	return c
}

// positioned gives the records the bundle's topic and consecutive offsets, as a poll would.
func (b *bundle) positioned(records ...*kgo.Record) []*kgo.Record {
	for i, r := range records {
		r.Topic, r.Offset = b.topic, int64(i)
	}
	return records
}

// totals reads user_totals.
func (b *bundle) totals(t *testing.T) map[totalKey]Total {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT user_id, currency, payment_count, amount_total::bigint FROM user_totals`)
	if err != nil {
		t.Fatalf("select user totals: %v", err)
	}
	defer rows.Close()
	got := map[totalKey]Total{}
	for rows.Next() {
		var k totalKey
		var total Total
		if err := rows.Scan(&k.userID, &k.currency, &total.Payments, &total.Amount); err != nil {
			t.Fatalf("scan user totals: %v", err)
		}
		got[k] = total
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("select user totals: %v", err)
	}
	return got
}

// verdict reads the decision of p.
func (b *bundle) verdict(t *testing.T, p event.PaymentCreated) string {
	t.Helper()
	var v string
	if err := b.pool.QueryRow(context.Background(), "SELECT decision FROM decisions WHERE payment_id = $1", p.PaymentID).Scan(&v); err != nil {
		t.Fatalf("select decision of %s: %v", p.PaymentID, err)
	}
	return v
}

// TestCountRecentBounds pins the SQL count of committed decisions to the window of
// Rules.inVelocityWindow: [occurred_at - window, occurred_at), same user, other payment.
func TestCountRecentBounds(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	c := b.newConsumer(t, b.config())
	window := time.Hour
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	self := newPayment("u-w", 100, at)
	// Decided earlier, each in its own batch: the window's start (in), a microsecond before
	// it (out: PostgreSQL keeps microseconds), the payment's own instant (out), and
	// another user's payment (out).
	decided := []event.PaymentCreated{
		newPayment("u-w", 100, at.Add(-window)),
		newPayment("u-w", 100, at.Add(-window-time.Microsecond)),
		newPayment("u-w", 100, at),
		newPayment("u-other", 100, at.Add(-time.Minute)),
	}
	for _, p := range decided {
		if _, err := c.processBatch(context.Background(), b.positioned(eventRecord(t, uuid.New(), p))); err != nil {
			t.Fatalf("processBatch: %v", err)
		}
	}

	tx, err := b.pool.Begin(context.Background())
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback(context.Background())
	got, _, err := selectHistory(context.Background(), tx, []Payment{{ID: self.PaymentID, UserID: "u-w", Currency: "EUR", OccurredAt: at}}, window, 10)
	if err != nil {
		t.Fatalf("selectHistory: %v", err)
	}
	if diff := cmp.Diff([]int{1}, got); diff != "" {
		t.Errorf("selectHistory's velocity count mismatch (-want +got):\n%s", diff)
	}
}

// TestSelectHistoryCapsTheVelocityCount: the count stops at the cap it is given (the
// consumer gives Rules.VelocityBlock, past which the verdict cannot change), and below the
// cap it is exact.
func TestSelectHistoryCapsTheVelocityCount(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	ctx := context.Background()
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := range 3 {
		if _, err := b.pool.Exec(ctx, `INSERT INTO decisions (payment_id, event_id, user_id, amount, currency, decision, occurred_at)
			VALUES ($1, $2, 'u-c', 100, 'EUR', 'approve', $3)`, uuid.New(), uuid.New(), at.Add(-time.Duration(i+1)*time.Minute)); err != nil {
			t.Fatalf("insert decision: %v", err)
		}
	}
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer tx.Rollback(ctx)
	p := Payment{ID: uuid.New(), UserID: "u-c", Currency: "EUR", OccurredAt: at}
	for _, tt := range []struct{ limit, want int }{{2, 2}, {3, 3}, {10, 3}} {
		got, _, err := selectHistory(ctx, tx, []Payment{p}, time.Hour, tt.limit)
		if err != nil {
			t.Fatalf("selectHistory: %v", err)
		}
		if got[0] != tt.want {
			t.Errorf("velocity count capped at %d = %d, want %d", tt.limit, got[0], tt.want)
		}
	}
}
