package outbox

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

// The relay's bookkeeping commits without waiting for the WAL flush, and nothing else
// may: an API transaction that did so could lose a payment's event in a crash.
func TestOnlyTheRelaysBookkeepingSkipsTheFlushWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// One connection, so that the check after the bookkeeping reads the very
	// connection it used.
	cfg := b.pool.Config()
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := store{pool: pool}
	setting := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		var v string
		if err := q.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	var inside string
	if err := s.withoutFlushWait(ctx, func(tx pgx.Tx) error { inside = setting(tx); return nil }); err != nil {
		t.Fatalf("withoutFlushWait: %v", err)
	}
	if inside != "off" {
		t.Errorf("synchronous_commit in the relay's bookkeeping = %q, want off", inside)
	}
	// The setting ends with the transaction: the connection goes back to the pool as
	// it came, and the API's transactions on it wait for the flush.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if got := setting(conn); got != "on" {
		t.Errorf("synchronous_commit after the bookkeeping = %q, want on", got)
	}
}

// A PostgreSQL crash undoes the bookkeeping commits that had not reached the disk: the
// newest ones, never one that an fsync covered (store.withoutFlushWait). Here the
// crash is played by putting the rows back as the undone commits had found them:
// both events of an aggregate published and marked, then both marks and the second
// claim undone, so the first event is pending under the dead relay's lease and the
// second was never claimed. Every event must reach Kafka again, with its id, and the
// first occurrences must keep the aggregate's order.
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
		UPDATE outbox_events
		SET status = 'pending', published_at = NULL,
		    lease_token = CASE WHEN id = $1 THEN gen_random_uuid() END,
		    lease_expires_at = CASE WHEN id = $1 THEN now() + interval '1 second' END`, first.ID); err != nil {
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
