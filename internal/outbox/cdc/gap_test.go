package cdc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The stream carries a transaction once its commit record is flushed; other sessions
// see its rows only once the committing backend is done, and under synchronous
// replication that waits for the standby's answer, for as long as it takes. These tests
// open that gap on a server of their own: a standby that never answers is required
// (synchronous_standby_names), for the writer's transaction only (synchronous_commit is
// local for everyone else, the relay included), and the gap closes when the test drops
// the requirement.

// gapBundle is a relay's test bundle on a private server that can hold a commit in the
// gap.
type gapBundle struct {
	*testBundle
	admin string // the private server's admin URL
}

func setupGap(t *testing.T) *gapBundle {
	t.Helper()
	pg := testenv.NewPrivatePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL, err := devstack.CreateDatabase(ctx, pg.URL, "payments")
	if err != nil {
		t.Fatal(err)
	}
	if err := devstack.MigrateDatabase(ctx, dbURL, migrations.Payments); err != nil {
		t.Fatal(err)
	}
	g := &gapBundle{testBundle: setupOn(t, dbURL), admin: pg.URL}
	g.configure(t, `ALTER SYSTEM SET synchronous_commit = 'local'`, `ALTER SYSTEM SET synchronous_standby_names = 'standby_that_never_answers'`)
	return g
}

// configure runs the ALTER SYSTEM statements and reloads the server's configuration.
func (g *gapBundle) configure(t *testing.T, statements ...string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), g.admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, s := range append(statements, `SELECT pg_reload_conf()`) {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// commitInGap starts a transaction inserting one event of aggregate, whose commit
// waits for the standby: the stream carries it while no other session sees the row.
// The returned channel gets the commit's outcome once the gap closes (closeGap).
func (g *gapBundle) commitInGap(t *testing.T, aggregate string) (uuid.UUID, <-chan error) {
	t.Helper()
	id := uuid.New()
	done := make(chan error, 1)
	go func() {
		done <- pgx.BeginFunc(context.Background(), g.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(context.Background(), `SET LOCAL synchronous_commit = on`); err != nil {
				return err
			}
			_, err := tx.Exec(context.Background(), `
				INSERT INTO outbox_events (id, event_type, aggregate_id, payload) VALUES ($1, 'TestEvent', $2, '{}')`, id, aggregate)
			return err
		})
	}()
	return id, done
}

// closeGap drops the standby requirement: the waiting commit completes and its row
// shows.
func (g *gapBundle) closeGap(t *testing.T, committed <-chan error) {
	t.Helper()
	g.configure(t, `ALTER SYSTEM RESET synchronous_standby_names`)
	select {
	case err := <-committed:
		if err != nil {
			t.Fatalf("commit in the gap: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the commit in the gap did not complete 30s after the gap closed")
	}
}

// An event acknowledged by Kafka while its row was not visible yet: the mark gives up
// after QueryTimeout, the slot is confirmed past the event, and the row shows up pending
// afterwards. The reconcile pass finds it (pending, behind the confirmed position) and
// publishes and marks it: it must not stay pending for good.
func TestRowLeftPendingBehindTheConfirmedPositionIsReconciled(t *testing.T) {
	t.Parallel()
	g := setupGap(t)
	g.cfg.ReconcileInterval = 200 * time.Millisecond
	r := g.start(t)
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) { return r.streaming(), "relay is not streaming" })

	id, committed := g.commitInGap(t, "gap")
	if records := g.consume(t, 1, 60*time.Second); len(records) != 1 {
		t.Fatalf("topic holds %d records, want the event published from the stream", len(records))
	}
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := r.metric(t, "outbox_published_total", "")
		return n == 1, fmt.Sprintf("outbox_published_total = %v, want 1 once the mark gave up", n)
	})
	g.closeGap(t, committed)

	testenv.WaitFor(t, 15*time.Second, func() (bool, string) {
		pending := g.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'pending'`, id)
		published := g.count(t, `SELECT count(*) FROM outbox_published WHERE id = $1`, id)
		return pending == 0 && published == 1, fmt.Sprintf("event %d pending, %d published: left pending behind the confirmed position", pending, published)
	})
}

// An event streamed in the gap whose aggregate is blocked by a dead letter: it goes to
// the DLQ behind it once its row shows, never dropped (neither published nor
// dead-lettered, with the slot confirmed past it).
func TestEventStreamedBeforeItsRowIsVisibleIsDeadLetteredBehindItsAggregate(t *testing.T) {
	t.Parallel()
	g := setupGap(t)
	first := g.insertFor(t, "gap")
	if _, err := (store{pool: g.pool}).deadLetter(context.Background(), first, "poison"); err != nil {
		t.Fatal(err)
	}
	r := g.start(t)
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) { return r.streaming(), "relay is not streaming" })

	second, committed := g.commitInGap(t, "gap")
	// Longer than the relay's QueryTimeout, in which a move that finds nothing tries
	// again: the relay must still hold the event when the row shows. The wait is the
	// gap's length, the test's input, not a wait for the relay.
	time.Sleep(2*g.cfg.QueryTimeout + time.Second)
	g.closeGap(t, committed)

	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		failed := g.count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND status = 'failed'`, second)
		dlq := g.count(t, `SELECT count(*) FROM outbox_dlq WHERE event_id = $1`, second)
		return failed == 1 && dlq == 1, fmt.Sprintf("held-back event: %d failed rows, %d DLQ rows, want 1 and 1", failed, dlq)
	})
	if ids := eventIDs(testenv.ConsumeAll(t, g.brokers, g.topic, 10*time.Second)); ids[second.String()] != 0 {
		t.Errorf("event %s is on the topic ahead of its aggregate's dead letter", second)
	}
}
