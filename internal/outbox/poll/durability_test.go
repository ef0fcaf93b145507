package poll

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/event"
)

// A batch's transaction commits without waiting for the WAL flush and is ended by the
// server after the lease, and nothing else gets either setting: an API transaction
// that skipped the flush could lose a payment's event in a crash.
func TestOnlyTheBatchTransactionSkipsTheFlushWaitAndHasTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// One connection, so that the check after the batch reads the very connection it
	// used.
	cfg := b.pool.Config()
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	b.insert(t, newMessage(t, "agg", 0))
	s := store{pool: pool}
	settings := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) [2]string {
		var v [2]string
		err := q.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('idle_in_transaction_session_timeout')`).
			Scan(&v[0], &v[1])
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tx, events, err := s.claim(ctx, 2500*time.Millisecond, 10)
	if err != nil || len(events) != 1 {
		t.Fatalf("claim: %d events, %v; want 1", len(events), err)
	}
	if got, want := settings(tx), [2]string{"off", "2500ms"}; got != want {
		t.Errorf("synchronous_commit, idle_in_transaction_session_timeout in a batch = %v, want %v", got, want)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The settings end with the transaction: the connection goes back to the pool as
	// it came, and the API's transactions on it wait for the flush.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if got, want := settings(conn), [2]string{"on", "0"}; got != want {
		t.Errorf("synchronous_commit, idle_in_transaction_session_timeout after the batch = %v, want %v", got, want)
	}
}

// A PostgreSQL crash undoes the batch commits that had not reached the disk: the
// newest ones, never one that an fsync covered (batch.go). Here the crash is played by
// putting the rows back as the undone commits had found them: both events of an
// aggregate published and moved to outbox_published, then both moves undone, so both
// are pending again. Every event must reach Kafka again, with its id, and the first
// occurrences must keep the aggregate's order.
func TestRelayRepublishesWhatACrashUndid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, second := newMessage(t, "agg", 0), newMessage(t, "agg", 1)
	b.insert(t, first, second)
	ctx, cancel := context.WithCancel(context.Background())
	r := b.newRelay(t)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	b.waitAllPublished(t, 2, 15*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	// The state the crash went back to.
	if _, err := b.pool.Exec(context.Background(), `
		WITH undone AS (DELETE FROM outbox_published RETURNING *)
		INSERT INTO outbox_events (id, seq, event_type, aggregate_id, payload, created_at)
		OVERRIDING SYSTEM VALUE
		SELECT id, seq, event_type, aggregate_id, payload, created_at FROM undone`); err != nil {
		t.Fatal(err)
	}
	startRelay(t, b.newRelay(t))
	b.waitAllPublished(t, 2, 20*time.Second)

	records := b.consume(t, 4, 15*time.Second)
	var ids []string
	var order []int
	seen := map[string]bool{}
	for _, rec := range records {
		id := header(rec, event.HeaderID)
		ids = append(ids, id)
		if seen[id] {
			continue
		}
		seen[id] = true
		var e testEvent
		if err := json.Unmarshal(rec.Value, &e); err != nil {
			t.Fatal(err)
		}
		order = append(order, e.N)
	}
	want := []string{first.ID.String(), second.ID.String(), first.ID.String(), second.ID.String()}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("X-Event-Id of the records in the partition (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 1}, order); diff != "" {
		t.Errorf("events by first occurrence (-want +got):\n%s", diff)
	}
}
