package cdc

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// A PostgreSQL restart in the middle of the stream, twice, while events keep being
// committed: the slot survives each one, the relay resumes from it (the same slot,
// whose catch-up is not done again), and every committed event reaches the topic at
// least once. The server is one of the test's own (testenv.NewPrivatePostgres): the
// shared one must never be restarted by a test.
//
// Expect many repeats: PostgreSQL 15 writes a logical slot's confirmed position to disk
// only when its restart position moves too (about every running-transactions record,
// 15 s apart on a busy server), and not at a shutdown checkpoint, so a restarted server
// streams again everything since that older position (PostgreSQL 17 saves it at
// shutdown). That is why this test cannot catch a relay that confirms a batch before
// Kafka acknowledged it: the confirmation does not outlive the restart, and the restart
// never stops a publish that had started (Kafka is up). TestOutageHoldsTheSlotAndDeadLettersNothing
// covers that order, with the relay itself stopped.
func TestResumesAfterAPostgresRestart(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPrivatePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dbURL, err := devstack.CreateDatabase(ctx, pg.URL, "payments")
	if err != nil {
		t.Fatal(err)
	}
	if err := devstack.MigrateDatabase(ctx, dbURL, migrations.Payments); err != nil {
		t.Fatal(err)
	}
	b := setupOn(t, dbURL)
	slot := DefaultSlot(dbURL)
	relay := b.start(t)
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) { return relay.streaming(), "relay is not streaming" })
	caughtUpAt := b.caughtUpAt(t, slot)

	w := b.startWriter(t)
	for restart := 1; restart <= 2; restart++ {
		// Mid-stream: events committed and published just before, more being committed.
		w.waitPublishedAtLeast(t, b, 40*restart)
		if err := pg.Restart(ctx); err != nil {
			t.Fatalf("restart %d: %v", restart, err)
		}
		testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
			return relay.streaming(), fmt.Sprintf("relay is not streaming again after restart %d", restart)
		})
	}
	w.waitPublishedAtLeast(t, b, 120)
	w.stop()

	if got := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot); got != 1 {
		t.Fatalf("%d slots named %s after the restarts, want 1", got, slot)
	}
	if got := b.caughtUpAt(t, slot); !got.Equal(caughtUpAt) {
		t.Errorf("slot's catch-up recorded at %s, then at %s: the relay made a new slot instead of resuming", caughtUpAt, got)
	}
	committed := b.committedIDs(t)
	for id := range w.acknowledged() {
		if !committed[id] {
			t.Fatalf("event %s was committed (the writer saw its COMMIT succeed) but is not in the table", id)
		}
	}
	// Every committed row is published and on the topic. A skipped event stays pending
	// for ever: the slot is past it and nothing streams it again.
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM outbox_events`)
		return n == 0, fmt.Sprintf("%d of %d committed events still unpublished: skipped by the relay?", n, len(committed))
	})
	// Every row is marked, so every record is acknowledged: the topic's end is final.
	onTopic := eventIDs(testenv.ConsumeAll(t, b.brokers, b.topic, 60*time.Second))
	var missing []uuid.UUID
	for id := range committed {
		if onTopic[id.String()] == 0 {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d committed events are not on the topic (first: %s)", len(missing), len(committed), missing[0])
	}
	t.Logf("%d events committed, %d records on the topic (%d repeats after the restarts)",
		len(committed), sumCounts(onTopic), sumCounts(onTopic)-len(onTopic))
}

// writer commits one event every few milliseconds, each in its own transaction as the
// API does, and keeps going through the restarts: a failed attempt is retried with a
// new event.
type writer struct {
	mu    sync.Mutex
	acked map[uuid.UUID]bool // COMMIT returned success
	stop  func()
}

func (b *testBundle) startWriter(t *testing.T) *writer {
	t.Helper()
	w := &writer{acked: map[uuid.UUID]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			id := uuid.New()
			payload, _ := json.Marshal(map[string]any{"n": n})
			msg := outbox.Message{ID: id, Type: "TestEvent", AggregateID: fmt.Sprintf("restart-%d", n),
				Payload: payload, OccurredAt: time.Now()}
			insertCtx, cancelInsert := context.WithTimeout(ctx, 2*time.Second)
			err := pgx.BeginFunc(insertCtx, b.pool, func(tx pgx.Tx) error { return outbox.Insert(insertCtx, tx, msg) })
			cancelInsert()
			if err == nil { // an error may still have committed: the table, not this map, is the truth
				w.mu.Lock()
				w.acked[id] = true
				w.mu.Unlock()
			}
		}
	})
	var once sync.Once
	w.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(w.stop)
	return w
}

func (w *writer) acknowledged() map[uuid.UUID]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[uuid.UUID]bool, len(w.acked))
	for id := range w.acked {
		out[id] = true
	}
	return out
}

// waitPublishedAtLeast waits until at least n events are published (moved to
// outbox_published); the database may be
// restarting meanwhile, so a failed count is a state, not a failure.
func (w *writer) waitPublishedAtLeast(t *testing.T, b *testBundle, n int) {
	t.Helper()
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
		var got int
		err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_published`).Scan(&got)
		if err != nil {
			return false, err.Error()
		}
		return got >= n, fmt.Sprintf("%d rows published, want at least %d", got, n)
	})
}

func (b *testBundle) committedIDs(t *testing.T) map[uuid.UUID]bool {
	t.Helper()
	rows, _ := b.pool.Query(context.Background(), `SELECT id FROM outbox_events UNION ALL SELECT id FROM outbox_published`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatalf("read committed events: %v", err)
	}
	out := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out
}

func (b *testBundle) caughtUpAt(t *testing.T, slot string) time.Time {
	t.Helper()
	var at time.Time
	if err := b.pool.QueryRow(context.Background(), `SELECT caught_up_at FROM outbox_cdc_slots WHERE slot_name = $1`, slot).Scan(&at); err != nil {
		t.Fatalf("catch-up of slot %s: %v", slot, err)
	}
	return at
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}
