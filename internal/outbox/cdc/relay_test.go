package cdc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The relay publishes the rows pending before its slot existed (from the slot's
// snapshot) and then the stream, each as the polling relay would: key = aggregate_id,
// the envelope headers, the payload bytes PostgreSQL stores, in commit order; and
// marks every row published.
func TestPublishesBacklogThenStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.insert(t, "before", 5)
	b.start(t)
	b.waitPublished(t, 5, 90*time.Second)
	after := b.insert(t, "after", 5)
	b.waitPublished(t, 10, 90*time.Second)

	records := b.consume(t, 10, 60*time.Second)
	if len(records) != 10 {
		t.Fatalf("topic holds %d records, want 10 (no duplicates on a clean run)", len(records))
	}
	byID := map[string]int{}
	for i, r := range records {
		env, herr := event.FromRecord(r)
		if herr != nil {
			t.Fatalf("record %d: %v", i, herr)
		}
		var aggregate, typ, payload string
		var createdAt time.Time
		err := b.pool.QueryRow(context.Background(), `
			SELECT aggregate_id, event_type, payload::text, created_at FROM outbox_published WHERE id = $1`,
			env.ID).Scan(&aggregate, &typ, &payload, &createdAt)
		if err != nil {
			t.Fatalf("row of record %s: %v", env.ID, err)
		}
		got := []string{string(r.Key), env.Type, string(r.Value), env.OccurredAt.UTC().Format(time.RFC3339Nano)}
		want := []string{aggregate, typ, payload, createdAt.UTC().Format(time.RFC3339Nano)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("record %s (key, type, value, occurred at) differs from its row (-row +record):\n%s", env.ID, diff)
		}
		byID[env.ID.String()] = int(r.Offset) + 1000*int(r.Partition)
	}
	for _, id := range append(before, after...) {
		if _, ok := byID[id.String()]; !ok {
			t.Errorf("event %s is not on the topic", id)
		}
	}
}

// A relay that stops keeps its slot; the next one resumes from the slot's confirmed
// position: it publishes what was committed meanwhile, and (after a clean stop)
// nothing again.
func TestRestartResumesFromTheSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.start(t)
	b.insert(t, "first", 20)
	b.waitPublished(t, 20, 90*time.Second)
	// The clean stop below is the premise: the first relay finished its start-up
	// catch-up (a catch-up cut short is done again, which republishes by design).
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		caughtUp := b.count(t, `SELECT count(*) FROM outbox_cdc_slots WHERE slot_name = $1`, DefaultSlot(b.dbURL)) == 1
		return caughtUp && b.confirmedLSN(t) > 0, "slot has no confirmed position or its catch-up is not recorded"
	})
	first.stop()
	if got := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, DefaultSlot(b.dbURL)); got != 1 {
		t.Fatalf("%d slots named %s after the relay stopped, want 1 (it must survive)", got, DefaultSlot(b.dbURL))
	}
	confirmedAtStop := b.confirmedLSN(t)

	b.insert(t, "meanwhile", 30)
	if got := b.confirmedLSN(t); got != confirmedAtStop {
		t.Fatalf("confirmed position moved from %d to %d with no relay running", confirmedAtStop, got)
	}
	b.start(t)
	b.waitPublished(t, 50, 90*time.Second)
	records := b.consume(t, 50, 60*time.Second)
	ids := eventIDs(records)
	if len(records) != 50 || len(ids) != 50 {
		t.Errorf("topic holds %d records of %d events, want 50 of 50: the restart republished or lost some", len(records), len(ids))
	}
}

// PostgreSQL ends the relay's walsender (as a server restart or a failover would): the
// relay reconnects and resumes from the slot, and no event is lost.
func TestResumesAfterTheWalsenderIsTerminated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	relay := b.start(t)
	// Streaming first: events committed before the slot exists are published by the
	// catch-up, before any walsender runs.
	testenv.WaitFor(t, 90*time.Second, func() (bool, string) { return relay.streaming(), "relay is not streaming" })
	b.insert(t, "a", 10)
	b.waitPublished(t, 10, 90*time.Second)

	var terminated bool
	err := b.pool.QueryRow(context.Background(), `
		SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active`,
		DefaultSlot(b.dbURL)).Scan(&terminated)
	if err != nil || !terminated {
		t.Fatalf("terminate the walsender: %v (terminated %t)", err, terminated)
	}
	b.insert(t, "b", 10)
	b.waitPublished(t, 20, 90*time.Second)
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		return relay.streaming(), "relay is not streaming again"
	})
	ids := eventIDs(b.consume(t, 20, 60*time.Second))
	if len(ids) != 20 {
		t.Errorf("topic holds %d distinct events, want 20", len(ids))
	}
}

// Two relays on one slot (two API replicas): PostgreSQL lets one stream, the other
// waits, and takes over when the first stops. Every event arrives.
func TestTwoRelaysShareOneSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	one := b.start(t)
	testenv.WaitFor(t, 90*time.Second, func() (bool, string) { return one.streaming(), "first relay is not streaming" })
	two := b.start(t)
	b.insert(t, "x", 10)
	b.waitPublished(t, 10, 90*time.Second)
	if !one.streaming() || two.streaming() {
		t.Fatalf("streaming: first %t, second %t; want only the first", one.streaming(), two.streaming())
	}

	one.stop()
	testenv.WaitFor(t, 20*time.Second, func() (bool, string) { return two.streaming(), "second relay did not take over" })
	b.insert(t, "y", 10)
	b.waitPublished(t, 20, 90*time.Second)
	if ids := eventIDs(b.consume(t, 20, 60*time.Second)); len(ids) != 20 {
		t.Errorf("topic holds %d distinct events, want 20", len(ids))
	}
}

// A slot whose catch-up never finished (the relay stopped between creating it and
// recording the catch-up) gets its pending rows published by the next relay:
// duplicates are allowed, a gap is not.
func TestUnfinishedCatchUpIsDoneAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	slot := DefaultSlot(b.dbURL)
	// The first relay's crash, replayed: the slot exists, the rows before it are
	// pending, and outbox_cdc_slots has no row for it.
	b.insert(t, "old", 5)
	conn, err := connect(context.Background(), b.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.createSlotIfMissing(context.Background(), slot); err != nil {
		t.Fatal(err)
	}
	conn.close(context.Background())
	b.start(t)
	b.waitPublished(t, 5, 90*time.Second)
	// The catch-up records the slot after its marks, a moment after the events show as
	// published.
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		got := b.count(t, `SELECT count(*) FROM outbox_cdc_slots WHERE slot_name = $1`, slot)
		return got == 1, fmt.Sprintf("catch-up of slot %s recorded %d times, want 1", slot, got)
	})
}

// WAL held back by a slot nobody reads grows with every write: that is what the gauge
// outbox_cdc_wal_retained_bytes and its alert watch.
func TestWALRetainedGrowsWhileTheRelayIsStopped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	relay := b.start(t)
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) { return relay.streaming(), "not streaming" })
	relay.stop()
	st := store{pool: b.pool}
	before, err := st.walRetained(context.Background(), DefaultSlot(b.dbURL))
	if err != nil {
		t.Fatal(err)
	}
	if before < 0 {
		t.Fatalf("WAL retained %d: the slot should exist", before)
	}
	// About 1 MB of WAL, in the outbox.
	_, err = b.pool.Exec(context.Background(), `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload)
		SELECT gen_random_uuid(), 'TestEvent', 'wal-' || i, jsonb_build_object('pad', repeat('x', 500))
		FROM generate_series(1, 2000) i`)
	if err != nil {
		t.Fatal(err)
	}
	after, err := st.walRetained(context.Background(), DefaultSlot(b.dbURL))
	if err != nil {
		t.Fatal(err)
	}
	if grew := after - before; grew < 1<<20 {
		t.Errorf("WAL retained grew by %d bytes over 2,000 rows of 500 bytes, want at least 1 MiB", grew)
	}
	if pending := b.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'pending'`); pending != 2000 {
		t.Errorf("pending %d, want 2000", pending)
	}

	running := b.start(t)
	b.waitPublished(t, 2000, 90*time.Second)
	// The running relay exports the figure: above zero while the slot holds any WAL.
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		got := int64(testutilGauge(running.metrics))
		return got > 0, fmt.Sprintf("outbox_cdc_wal_retained_bytes = %d, want the slot's figure (> 0)", got)
	})
}
