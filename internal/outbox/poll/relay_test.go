package poll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/outbox"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

func TestRelayDeliversEveryCommittedEventAndNoRolledBackOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newRelay(t)
	startRelay(t, r)

	var msgs []outbox.Message
	for i := range 40 {
		msgs = append(msgs, newMessage(t, fmt.Sprintf("agg-%d", i), 0))
	}
	b.insert(t, msgs...)
	r.Notify()
	// A transaction that rolls back after its Insert: the event must never appear.
	rolledBack := newMessage(t, "agg-rolled-back", 0)
	errRollback := errors.New("business rule failed after the insert")
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		if err := outbox.Insert(context.Background(), tx, rolledBack); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatalf("rolled-back transaction: got %v, want %v", err, errRollback)
	}

	b.waitAllPublished(t, len(msgs), 15*time.Second)
	records := b.consume(t, len(msgs), 15*time.Second)
	if end := b.topicEnd(t); end != int64(len(msgs)) {
		t.Errorf("topic holds %d records, want %d (one per committed event, none for the rolled-back one)", end, len(msgs))
	}

	// The payload is stored as jsonb, so it comes back equal as JSON, not byte for byte.
	type delivered struct {
		ID, Type, Key string
		Value         testEvent
	}
	decode := func(b []byte) testEvent {
		var e testEvent
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("payload %s: %v", b, err)
		}
		return e
	}
	var got, want []delivered
	for _, m := range msgs {
		want = append(want, delivered{m.ID.String(), m.Type, m.AggregateID, decode(m.Payload)})
	}
	for _, rec := range records {
		got = append(got, delivered{header(rec, event.HeaderID), header(rec, event.HeaderType), string(rec.Key), decode(rec.Value)})
		occurred, err := time.Parse(time.RFC3339Nano, header(rec, event.HeaderOccurredAt))
		if err != nil || occurred.Location() != time.UTC {
			t.Errorf("X-Event-Occurred-At %q: want RFC 3339 in UTC (parse error %v)", header(rec, event.HeaderOccurredAt), err)
		}
	}
	byID := func(a, b delivered) int { return strings.Compare(a.ID, b.ID) }
	slices.SortFunc(got, byID)
	slices.SortFunc(want, byID)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("delivered records (-want +got):\n%s", diff)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events`); n != 0 {
		t.Errorf("%d rows left in outbox_events after every event was published, want 0", n)
	}
}

func TestRelayKeepsOrderPerAggregateWithSeveralWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.Workers = 4
	b.cfg.BatchSize = 3 // many small batches, so workers really interleave
	const aggregates, perAggregate = 8, 8
	// Interleaved inserts: agg-0 #0, agg-1 #0, ..., agg-0 #1, ...
	var msgs []outbox.Message
	for n := range perAggregate {
		for a := range aggregates {
			msgs = append(msgs, newMessage(t, fmt.Sprintf("agg-%d", a), n))
		}
	}
	b.insert(t, msgs...)
	startRelay(t, b.newRelay(t))

	b.waitAllPublished(t, len(msgs), 30*time.Second)
	records := b.consume(t, len(msgs), 15*time.Second)
	got := map[string][]int{}
	for _, rec := range records { // records of one key share a partition, in log order
		var e testEvent
		if err := json.Unmarshal(rec.Value, &e); err != nil {
			t.Fatal(err)
		}
		got[string(rec.Key)] = append(got[string(rec.Key)], e.N)
	}
	want := map[string][]int{}
	for a := range aggregates {
		for n := range perAggregate {
			want[fmt.Sprintf("agg-%d", a)] = append(want[fmt.Sprintf("agg-%d", a)], n)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("event order per aggregate in the topic (-want +got):\n%s", diff)
	}
}

// A relay that hangs after Kafka acknowledged its batch, before marking it (paused,
// partitioned from the database): its rows stay locked until the database ends its
// idle transaction after the lease, then another relay publishes them again with the
// same event ids, which is what consumers deduplicate on.
func TestRelayRepublishesAfterCrashBetweenAckAndMark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var msgs []outbox.Message
	for i := range 10 {
		msgs = append(msgs, newMessage(t, fmt.Sprintf("agg-%d", i), 0))
	}
	b.insert(t, msgs...)

	dying := b.newRelay(t)
	client := newProducer(t, dying)
	ctx := context.Background()
	tx, claimed, err := dying.claim(ctx)
	if err != nil || len(claimed) != len(msgs) {
		t.Fatalf("claim: got %d events, %v; want %d", len(claimed), err, len(msgs))
	}
	published, failures, _ := dying.publish(ctx, &worker{own: client, alone: client}, claimed)
	if len(published) != len(msgs) || len(failures) != 0 {
		t.Fatalf("publish: %d acknowledged, failures %v; want %d acknowledged", len(published), failures, len(msgs))
	}
	// The hang: no mark, and the transaction left open. While the lease lives, nobody
	// else may take the rows.
	if _, again, err := dying.claim(ctx); err != nil || len(again) != 0 {
		t.Fatalf("claim under a live lease: got %d events, %v; want none", len(again), err)
	}
	defer rollback(tx)

	claimedAt := time.Now()
	startRelay(t, b.newRelay(t))
	b.waitAllPublished(t, len(msgs), 20*time.Second)
	if elapsed := time.Since(claimedAt); elapsed < b.cfg.Lease-500*time.Millisecond {
		t.Errorf("rows republished %s after the crash, want no sooner than the lease (%s)", elapsed, b.cfg.Lease)
	}
	records := b.consume(t, 2*len(msgs), 15*time.Second)
	copies := map[string]int{}
	for _, rec := range records {
		copies[header(rec, event.HeaderID)]++
	}
	want := map[string]int{}
	for _, m := range msgs {
		want[m.ID.String()] = 2
	}
	if diff := cmp.Diff(want, copies); diff != "" {
		t.Errorf("copies per X-Event-Id (-want +got):\n%s", diff)
	}
}

// A worker whose lease expired must not overwrite the outcome recorded by the worker
// that claimed the rows after it: the database ended its transaction, so its late
// outcome fails with it and changes nothing.
func TestRelayLeaseFencesLateOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msg := newMessage(t, "agg", 0)
	b.insert(t, msg)
	r := b.newRelay(t)
	ctx := context.Background()

	const lease = 300 * time.Millisecond
	stale, got, err := r.store.claim(ctx, lease, 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("first claim: %d events, %v; want 1", len(got), err)
	}
	t.Cleanup(func() { rollback(stale) }) // gives the connection back, whatever happens below
	var fresh pgx.Tx
	var freshEvents []claimedEvent
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		tx, again, err := r.store.claim(ctx, 30*time.Second, 10)
		if err != nil || len(again) != 1 {
			return false, fmt.Sprintf("second claim: %d events, %v; want 1 once the first lease has expired", len(again), err)
		}
		fresh, freshEvents = tx, again
		return true, ""
	})
	defer rollback(fresh)

	// The stale owner reports a failure, then a success: both must fail and change
	// nothing.
	if _, err := r.record(ctx, stale, nil, []failure{{ID: msg.ID, Err: "late failure", Rejected: true}}); !isLeaseExpired(err) {
		t.Errorf("stale record of a failure: %v, want the database's idle-in-transaction timeout", err)
	}
	if n := r.metrics.leasesExpired; testutil.ToFloat64(n) != 1 {
		t.Errorf("outbox_leases_expired_total = %v, want 1", testutil.ToFloat64(n))
	}
	if _, err := r.store.markPublished(ctx, stale, got); err == nil {
		t.Error("stale markPublished succeeded, want an error")
	}

	// The fresh owner's outcome is recorded.
	if _, err := r.record(ctx, fresh, freshEvents, nil); err != nil {
		t.Fatalf("fresh record: %v", err)
	}
	if got := b.statusCounts(t); !cmp.Equal(got, map[string]int{"published": 1}) {
		t.Errorf("statuses after the fresh outcome: %v, want one published", got)
	}
	if n := b.count(t, `SELECT rejections FROM outbox_published`); n != 0 {
		t.Errorf("rejections of the published event = %d, want 0 (the stale rejection must not count)", n)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_dlq`); n != 0 {
		t.Errorf("DLQ rows after a stale rejection: %d, want 0", n)
	}
}

// OccurredAt comes from the API host's clock, the claim compares with the database's.
// An API host whose clock runs an hour ahead must not delay its events by an hour.
func TestInsertedEventIsClaimableAtOnceWhateverTheAPIHostClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msg := newMessage(t, "skewed-api-host", 0)
	msg.OccurredAt = time.Now().Add(time.Hour)
	b.insert(t, msg)

	tx, claimed, err := b.newRelay(t).claim(context.Background())
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if tx != nil {
		defer rollback(tx)
	}
	if len(claimed) != 1 || claimed[0].ID != msg.ID {
		t.Fatalf("claimed %d events, want the one just inserted", len(claimed))
	}
	if !claimed[0].CreatedAt.Equal(msg.OccurredAt.Truncate(time.Microsecond)) {
		t.Errorf("created_at = %s, want the event time %s", claimed[0].CreatedAt, msg.OccurredAt)
	}
}

// Stopping the relay while Kafka does not answer: Run returns within the shutdown
// timeout, and the abandoned batch's rows are handed back at once (its transaction
// ends) rather than left until the lease expires.
func TestRelayStopReleasesLeasesOfAbandonedBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.PublishTimeout = 5 * time.Second
	b.cfg.Lease = 30 * time.Second
	b.cfg.ShutdownTimeout = 200 * time.Millisecond
	// Nothing listens here: every dial fails, so the batch waits out its deadline.
	b.cfg.Brokers = []string{"127.0.0.1:1"}
	for i := range 5 {
		b.insert(t, newMessage(t, fmt.Sprintf("agg-%d", i), 0))
	}
	r := b.newRelay(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		if n := b.lockedRows(t); n != 5 {
			return false, fmt.Sprintf("%d rows held by a batch, want 5", n)
		}
		return true, ""
	})
	stoppedAt := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after stop")
	}
	if took := time.Since(stoppedAt); took > 3*time.Second {
		t.Errorf("stop took %s, want about the shutdown timeout (%s)", took, b.cfg.ShutdownTimeout)
	}
	if n := b.lockedRows(t); n != 0 {
		t.Errorf("%d rows still held by a batch after stop, want 0", n)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_events WHERE status <> 'pending' OR attempts <> 0`); n != 0 {
		t.Errorf("%d rows changed after stop, want all 5 pending, attempts 0", n)
	}
}
