package cdc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// max_slot_wal_keep_size (set by the stack) lets PostgreSQL invalidate a slot that holds
// too much WAL, instead of filling the disk: the slot then exists but can stream
// nothing. The relay must not retry it for ever: it replaces the slot, and the new
// slot's catch-up publishes every row still pending, those committed while the old one
// was being lost included.
func TestReplacesASlotInvalidatedByMaxSlotWALKeepSize(t *testing.T) {
	t.Parallel()
	g := setupGap(t) // a private server: the test fills its WAL
	g.configure(t, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`)
	slot := DefaultSlot(g.dbURL)
	r := g.start(t)
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) { return r.streaming(), "relay is not streaming" })
	r.stop()

	g.insert(t, "while-stopped", 5)
	ctx := context.Background()
	for _, s := range []string{
		`CREATE TABLE filler AS SELECT g, repeat('x', 1000) AS pad FROM generate_series(1, 60000) g`,
		`SELECT pg_switch_wal()`,
		`CHECKPOINT`,
	} {
		if _, err := g.pool.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if status := g.walStatus(t, slot); status != "lost" {
		t.Fatalf("slot %s wal_status = %q after filling the WAL, want lost (the test's setup)", slot, status)
	}

	g.start(t)
	testenv.WaitFor(t, 60*time.Second, func() (bool, string) {
		n := g.count(t, `SELECT count(*) FROM outbox_published`)
		return n == 5, fmt.Sprintf("%d of the 5 events committed while the slot was lost are published", n)
	})
	if status := g.walStatus(t, slot); status == "lost" {
		t.Errorf("slot %s is still lost after the relay started", slot)
	}
}

func (b *testBundle) walStatus(t *testing.T, slot string) string {
	t.Helper()
	var status string
	err := b.pool.QueryRow(context.Background(),
		`SELECT coalesce((SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1), '')`, slot).Scan(&status)
	if err != nil {
		t.Fatal(err)
	}
	return status
}
