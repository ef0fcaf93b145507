package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/outbox/cdc"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// createSlot creates a logical slot named slot on dbURL's database, as a CDC relay
// would, and drops it when the test ends if it is still there.
func createSlot(t *testing.T, dbURL, slot string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatalf("create slot %s: %v", slot, err)
	}
	t.Cleanup(func() { dropSlot(t, dbURL, slot) })
}

func slotExists(t *testing.T, dbURL, slot string) bool {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// Switched back to RELAY_MODE=poll, the API drops the CDC relay's slot, which nobody
// reads any more and which would hold the server's WAL for ever.
func TestRunInPollModeDropsTheCDCSlot(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t, migrations.Payments)
	slot := cdc.DefaultSlot(dbURL)
	createSlot(t, dbURL, slot)
	_, _, stdout, cancel, done := startRunWith(t, map[string]string{"DATABASE_URL": dbURL, "RELAY_MODE": "poll"})
	defer func() { cancel(); <-done }()
	adminBase(t, stdout) // serving
	eventually(t, 30*time.Second, "drop of slot "+slot, func() bool { return !slotExists(t, dbURL, slot) })
}

// A slot the API does not know as its own (a renamed one, or one of another relay of
// the database) is left alone, but its WAL shows in /metrics in polling mode too, so
// that OutboxReplicationSlotUnread can fire.
func TestRunInPollModeExportsTheWALOfEverySlot(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t, migrations.Payments)
	slot := cdc.DefaultSlot(dbURL) + "_renamed"
	createSlot(t, dbURL, slot)
	_, _, stdout, cancel, done := startRunWith(t, map[string]string{"DATABASE_URL": dbURL, "RELAY_MODE": "poll"})
	defer func() { cancel(); <-done }()
	admin := adminBase(t, stdout)
	want := fmt.Sprintf("outbox_replication_slot_wal_retained_bytes{slot=%q}", slot)
	var body []byte
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		body = httpDo(t, "GET", admin+"/metrics", "", nil).Body
		return bytes.Contains(body, []byte(want)), "GET /metrics lacks " + want
	})
	if !slotExists(t, dbURL, slot) {
		t.Errorf("slot %s was dropped: not the API's to drop", slot)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "outbox_cdc_wal_retained_bytes") {
			t.Errorf("polling mode exports %q: the CDC relay's own gauge must stay absent, so that the alert sees no relay reads the slot", line)
		}
	}
}

// `api cdc drop-slot` drops the slot on demand, says so, and says nothing was there the
// second time.
func TestCDCDropSlotCommand(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t, migrations.Payments)
	slot := cdc.DefaultSlot(dbURL)
	createSlot(t, dbURL, slot)
	env := map[string]string{"DATABASE_URL": dbURL}
	for _, want := range []string{
		fmt.Sprintf(`{"slot":%q,"dropped":true}`, slot),
		fmt.Sprintf(`{"slot":%q,"dropped":false}`, slot),
	} {
		var out bytes.Buffer
		if err := run(context.Background(), []string{"api", "cdc", "drop-slot"}, func(k string) string { return env[k] }, &out); err != nil {
			t.Fatalf("api cdc drop-slot: %v", err)
		}
		if got := strings.TrimSpace(out.String()); got != want {
			t.Errorf("api cdc drop-slot printed %s, want %s", got, want)
		}
	}
	if slotExists(t, dbURL, slot) {
		t.Errorf("slot %s still exists after api cdc drop-slot", slot)
	}
}
