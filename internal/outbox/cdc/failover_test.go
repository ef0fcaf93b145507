package cdc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The primary crashes under a streaming relay and its standby is promoted: the relay,
// on a multi-host URL, reconnects to the new primary without a restart, creates its
// slot there (the old one died with the old primary: a logical slot is not replicated
// before PostgreSQL 17), catches up the rows still pending, and streams on; every
// event whose COMMIT succeeded reaches the topic. The replication is synchronous
// (testenv.NewPrivateStandby), so a commit the primary acknowledged is on the standby.
// Both servers are the test's own.
func TestFollowsAPromotedStandby(t *testing.T) {
	t.Parallel()
	primary := testenv.NewPrivatePostgres(t)
	standby := testenv.NewPrivateStandby(t, primary)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dbURL, err := devstack.CreateDatabase(ctx, primary.URL, "payments")
	if err != nil {
		t.Fatal(err)
	}
	if err := devstack.MigrateDatabase(ctx, dbURL, migrations.Payments); err != nil {
		t.Fatal(err)
	}
	b := setupOn(t, testenv.MultiHostURL("payments", primary, standby))
	slot := DefaultSlot(b.dbURL)
	relay := b.start(t)
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) { return relay.streaming(), "relay is not streaming" })
	caughtUpAt := b.caughtUpAt(t, slot)

	w := b.startWriter(t)
	w.waitPublishedAtLeast(t, b, 40)
	if err := primary.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	// Progress after the promotion can only come from the new primary: the old one is
	// gone, and the count below runs there.
	var before int
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_published`).Scan(&before)
		return err == nil, fmt.Sprintf("no answer from the new primary: %v", err)
	})
	w.waitPublishedAtLeast(t, b, before+40)
	w.stop()

	var server string
	if err := b.pool.QueryRow(ctx, `SELECT host(inet_server_addr()) || ':' || inet_server_port()`).Scan(&server); err != nil {
		t.Fatal(err)
	}
	if server != standby.Addr {
		t.Fatalf("the pool reaches %s, want the promoted standby %s", server, standby.Addr)
	}
	if got := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot); got != 1 {
		t.Fatalf("%d slots named %s on the new primary, want 1 (the relay's new slot)", got, slot)
	}
	if got := b.caughtUpAt(t, slot); !got.After(caughtUpAt) {
		t.Errorf("slot's catch-up recorded at %s, and still at %s on the new primary: it caught nothing up", caughtUpAt, got)
	}
	committed := b.committedIDs(t)
	for id := range w.acknowledged() {
		if !committed[id] {
			t.Fatalf("event %s was committed (the writer saw its COMMIT succeed) but is not on the new primary", id)
		}
	}
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM outbox_events`)
		return n == 0, fmt.Sprintf("%d of %d committed events still unpublished on the new primary", n, len(committed))
	})
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
	t.Logf("%d events committed, %d records on the topic (%d repeats after the failover)",
		len(committed), sumCounts(onTopic), sumCounts(onTopic)-len(onTopic))
}
