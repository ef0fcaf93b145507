package antifraud

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

func TestSameEventDeliveredThreeTimes(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	c := b.start(t, b.config())

	id := uuid.New()
	p := newPayment("u-1", 1999, time.Now())
	// The first copy alone, so the next two are redeliveries of a committed event.
	b.produce(t, eventRecord(t, id, p))
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, "SELECT count(*) FROM decisions")
		return n == 1, fmt.Sprintf("%d decisions", n)
	})
	b.produce(t, eventRecord(t, id, p), eventRecord(t, id, p))
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, "SELECT deliveries FROM processed_events WHERE event_id = $1", id)
		return n == 3, fmt.Sprintf("deliveries = %d", n)
	})

	if got := b.count(t, "SELECT count(*) FROM decisions WHERE payment_id = $1 AND event_id = $2", p.PaymentID, id); got != 1 {
		t.Errorf("decisions of the payment = %d, want 1", got)
	}
	if got := b.count(t, "SELECT count(*) FROM decisions"); got != 1 {
		t.Errorf("decisions = %d, want 1", got)
	}
	if got := testutil.ToFloat64(c.metrics.duplicates); got != 2 {
		t.Errorf("antifraud_duplicates_total = %v, want 2", got)
	}
	if got := testutil.ToFloat64(c.metrics.processed); got != 1 {
		t.Errorf("antifraud_processed_total = %v, want 1", got)
	}
}

// TestSameEventTwiceInOneBatch covers the other path of a duplicate: copies of one event in
// the same poll, which must not make the batch's INSERT hit the same key twice.
func TestSameEventTwiceInOneBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	c, err := NewConsumer(b.pool, b.config(), discardLogger(), mustMetrics(t))
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	id := uuid.New()
	p := newPayment("u-1", 1999, time.Now())
	records := []*kgo.Record{eventRecord(t, id, p), eventRecord(t, id, p), eventRecord(t, id, p)}
	for i, r := range records {
		r.Topic, r.Offset = b.topic, int64(i)
	}

	res, err := c.processBatch(context.Background(), records)
	if err != nil {
		t.Fatalf("processBatch: %v", err)
	}
	if res.processed != 1 || res.duplicates != 2 {
		t.Errorf("processed, duplicates = %d, %d, want 1, 2", res.processed, res.duplicates)
	}
	if got := b.count(t, "SELECT deliveries FROM processed_events WHERE event_id = $1", id); got != 3 {
		t.Errorf("deliveries = %d, want 3", got)
	}

	// The same batch again, as after a crash before the offset commit: no new effect.
	res, err = c.processBatch(context.Background(), records)
	if err != nil {
		t.Fatalf("processBatch again: %v", err)
	}
	if res.processed != 0 || res.duplicates != 3 {
		t.Errorf("second time: processed, duplicates = %d, %d, want 0, 3", res.processed, res.duplicates)
	}
	if got := b.count(t, "SELECT count(*) FROM decisions"); got != 1 {
		t.Errorf("decisions = %d, want 1", got)
	}
}

func TestCrashAfterDatabaseCommitRedelivers(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	const events = 10
	var records []*kgo.Record
	for range events {
		records = append(records, eventRecord(t, uuid.New(), newPayment("u-crash", 500, time.Now())))
	}
	b.produce(t, records...)

	// The first consumer dies after its first transaction committed, before its offsets.
	cfg := b.config()
	var crashed atomic.Bool
	cfg.AfterDBCommit = func() error {
		crashed.Store(true)
		return errTestCrash
	}
	first := b.start(t, cfg)
	if err := first.wait(t, 60*time.Second); !errors.Is(err, errTestCrash) {
		t.Fatalf("first consumer: Run = %v, want the injected crash", err)
	}
	if !crashed.Load() {
		t.Fatal("AfterDBCommit was never called")
	}
	processedBeforeCrash := b.count(t, "SELECT count(*) FROM processed_events")
	if processedBeforeCrash == 0 {
		t.Fatal("no event in the database after the first commit")
	}
	if got := b.committed(t); got[0] > 0 {
		t.Fatalf("committed offset after the crash = %d, want none", got[0])
	}

	// After the restart the same events come again and have no second effect.
	second := b.start(t, b.config())
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
		n := b.count(t, "SELECT count(*) FROM decisions")
		d := b.count(t, "SELECT coalesce(sum(deliveries), 0) FROM processed_events")
		return n == events && d == events+processedBeforeCrash,
			fmt.Sprintf("%d decisions, %d deliveries; want %d and %d", n, d, events, events+processedBeforeCrash)
	})
	if got, want := testutil.ToFloat64(second.metrics.duplicates), float64(processedBeforeCrash); got != want {
		t.Errorf("antifraud_duplicates_total after restart = %v, want %v", got, want)
	}
	if got := b.count(t, "SELECT count(DISTINCT payment_id) FROM decisions"); got != events {
		t.Errorf("payments with a decision = %d, want %d", got, events)
	}
}

func TestRebalanceMidStream(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	const events = 300
	var records []*kgo.Record
	for i := range events {
		records = append(records, eventRecord(t, uuid.New(), newPayment(fmt.Sprintf("u-%d", i%7), 100, time.Now())))
	}
	decided := func() int { return b.count(t, "SELECT count(*) FROM decisions") }

	first := b.start(t, b.config())
	b.produce(t, records[:100]...)
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) { return decided() > 0, "no decision yet" })

	// A second member joins while events keep coming: the partitions are rebalanced.
	second := b.start(t, b.config())
	b.waitForMembers(t, 2)
	b.produce(t, records[100:200]...)
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(second.metrics.processed)
		return n > 0, "the second member has processed nothing yet"
	})

	// The first member leaves mid-stream: its partitions move to the second one.
	if err := first.stop(t); err != nil {
		t.Fatalf("stop first consumer: %v", err)
	}
	b.produce(t, records[200:]...)

	testenv.WaitFor(t, 90*time.Second, func() (bool, string) {
		n := decided()
		return n == events, fmt.Sprintf("%d of %d decisions", n, events)
	})
	if got := b.count(t, "SELECT count(DISTINCT payment_id) FROM decisions"); got != events {
		t.Errorf("payments with a decision = %d, want %d", got, events)
	}
	if got := b.count(t, "SELECT count(*) FROM processed_events"); got != events {
		t.Errorf("processed events = %d, want %d", got, events)
	}
	t.Logf("duplicates absorbed: first %v, second %v",
		testutil.ToFloat64(first.metrics.duplicates), testutil.ToFloat64(second.metrics.duplicates))
}

func TestPoisonRecordDoesNotStallThePartition(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	c := b.start(t, b.config())

	good := func() *kgo.Record { return eventRecord(t, uuid.New(), newPayment("u-1", 100, time.Now())) }
	withHeader := func(r *kgo.Record, key, value string) *kgo.Record {
		for i, h := range r.Headers {
			if h.Key == key {
				r.Headers[i].Value = []byte(value)
			}
		}
		return r
	}
	missingID := good()
	missingID.Headers = missingID.Headers[1:]
	badJSON := good()
	badJSON.Value = []byte(`{"payment_id": `)

	b.produce(t,
		good(),
		missingID,
		withHeader(good(), event.HeaderID, "not-a-uuid"),
		withHeader(good(), event.HeaderType, "PaymentAuthorized"),
		badJSON,
		good(),
	)
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, "SELECT count(*) FROM decisions")
		return n == 2, fmt.Sprintf("%d of 2 decisions", n)
	})

	rows, err := b.pool.Query(context.Background(), `SELECT "offset", reason FROM consumer_dead_letters ORDER BY "offset"`)
	if err != nil {
		t.Fatalf("select dead letters: %v", err)
	}
	type letter struct {
		Offset int64
		Reason string
	}
	var got []letter
	for rows.Next() {
		var l letter
		if err := rows.Scan(&l.Offset, &l.Reason); err != nil {
			t.Fatalf("scan dead letter: %v", err)
		}
		got = append(got, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("select dead letters: %v", err)
	}
	want := []letter{
		{1, PoisonMissingEventID},
		{2, PoisonInvalidEventID},
		{3, PoisonUnknownEventType},
		{4, PoisonInvalidPayload},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dead letters mismatch (-want +got):\n%s", diff)
	}
	// The counter moves once the batch's transaction has committed, which may be just
	// after the decisions became visible.
	for _, reason := range []string{PoisonMissingEventID, PoisonInvalidEventID, PoisonUnknownEventType, PoisonInvalidPayload} {
		testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
			got := testutil.ToFloat64(c.metrics.poison.WithLabelValues(reason))
			return got == 1, fmt.Sprintf("antifraud_poison_total{reason=%q} = %v, want 1", reason, got)
		})
	}

	// The partition moved past the poison: a clean stop commits everything.
	if err := c.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if got := b.committed(t); got[0] != 6 {
		t.Errorf("committed offset after stop = %d, want 6", got[0])
	}
}

// Velocity counts the user's earlier payments from the database and from the same batch,
// and a redelivery does not change a decision.
func TestVelocityAcrossBatchesAndRedelivery(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	cfg := b.config()
	cfg.Rules = Rules{ReviewAmount: 1_000_000, VelocityWindow: time.Hour, VelocityReview: 2, VelocityBlock: 3}
	c, err := NewConsumer(b.pool, cfg, discardLogger(), mustMetrics(t))
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var offset int64
	batch := func(records ...*kgo.Record) {
		t.Helper()
		for _, r := range records {
			r.Topic, r.Offset = b.topic, offset
			offset++
		}
		if _, err := c.processBatch(context.Background(), records); err != nil {
			t.Fatalf("processBatch: %v", err)
		}
	}
	verdict := func(p event.PaymentCreated) string {
		t.Helper()
		var v string
		if err := b.pool.QueryRow(context.Background(), "SELECT decision FROM decisions WHERE payment_id = $1", p.PaymentID).Scan(&v); err != nil {
			t.Fatalf("select decision of %s: %v", p.PaymentID, err)
		}
		return v
	}

	p1, p2 := newPayment("u-v", 100, at), newPayment("u-v", 100, at.Add(time.Minute))
	p3, p4 := newPayment("u-v", 100, at.Add(2*time.Minute)), newPayment("u-v", 100, at.Add(3*time.Minute))
	third := eventRecord(t, uuid.New(), p3)
	thirdID := uuid.MustParse(string(third.Headers[0].Value))
	batch(eventRecord(t, uuid.New(), p1), eventRecord(t, uuid.New(), p2))
	// p3 finds two earlier payments in the database, p4 three.
	batch(third)
	batch(eventRecord(t, uuid.New(), p4))
	// A payment that occurred before p3 arrives late (the order dependence of the package
	// documentation): p3 decided now would find three earlier payments and be blocked.
	late := newPayment("u-v", 100, at.Add(90*time.Second))
	batch(eventRecord(t, uuid.New(), late))
	// p3 delivered again: its decision must not change.
	batch(eventRecord(t, thirdID, p3))

	got := []string{verdict(p1), verdict(p2), verdict(p3), verdict(p4), verdict(late)}
	want := []string{"approve", "approve", "review", "block", "review"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts of p1..p4, late mismatch (-want +got):\n%s", diff)
	}
}
