package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/outbox/cdc"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// RELAY_MODE=cdc: the same program, with the CDC relay publishing. A payment's event
// reaches "published" in GET /payments/{id} as in polling mode, and /metrics shows the
// relay streaming from its slot.
func TestRunInCDCMode(t *testing.T) {
	t.Parallel()
	dbURL := testenv.NewDatabase(t, migrations.Payments)
	// Registered before startRunWith's cleanups, so it runs after run has returned:
	// the slot is server-wide and would outlive the test's database.
	t.Cleanup(func() { dropSlot(t, dbURL, cdc.DefaultSlot(dbURL)) })
	base, key, stdout, cancel, done := startRunWith(t, map[string]string{"DATABASE_URL": dbURL, "RELAY_MODE": "cdc"})

	headers := map[string]string{"Content-Type": "application/json", "Idempotency-Key": "cdc-1", "Authorization": "Bearer " + key}
	created := httpDo(t, http.MethodPost, base+"/payments", `{"user_id": "u-7", "amount": 500, "currency": "EUR"}`, headers)
	if created.StatusCode != http.StatusCreated {
		t.Fatalf("POST /payments: status = %d, want 201; body %s", created.StatusCode, created.Body)
	}
	var p struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(created.Body, &p); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "published event in GET /payments/"+p.ID, func() bool {
		var view struct {
			Event struct {
				Status string `json:"status"`
			} `json:"event"`
		}
		res := httpDo(t, http.MethodGet, base+"/payments/"+p.ID, "", bearer(key))
		return json.Unmarshal(res.Body, &view) == nil && view.Event.Status == "published"
	})
	metrics := httpDo(t, http.MethodGet, adminBase(t, stdout)+"/metrics", "", nil)
	for _, want := range []string{"outbox_cdc_streaming 1", "outbox_published_total 1"} {
		if !bytes.Contains(metrics.Body, []byte(want)) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v after cancel, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30 s of cancel")
	}
}

// dropSlot drops a replication slot once its walsender is gone.
func dropSlot(t *testing.T, dbURL, slot string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Errorf("drop slot %s: %v", slot, err)
		return
	}
	defer conn.Close(ctx)
	for {
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("drop slot %s: %v (drop it by hand)", slot, err)
			return
		case <-time.After(100 * time.Millisecond): // a server-side process ending; no signal to wait on
		}
	}
}
