package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// The API on a multi-host DATABASE_URL, through the loss of its primary and the
// promotion of the standby, in both relay modes: /readyz answers 503 while no server
// accepts writes (the primary is down, the standby still in recovery), 200 again once
// the standby is promoted, without a restart; a payment made then is published; and
// the process says so, in its log and in postgres_primary_changes_total. The servers
// are the test's own (testenv.NewPrivateStandby).
func TestRunFollowsAPromotedStandby(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"poll", "cdc"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			primary := testenv.NewPrivatePostgres(t)
			standby := testenv.NewPrivateStandby(t, primary)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dbURL, err := devstack.CreateDatabase(ctx, primary.URL, "payments")
			if err != nil {
				t.Fatal(err)
			}
			if err := devstack.MigrateDatabase(ctx, dbURL, migrations.Payments); err != nil {
				t.Fatal(err)
			}
			base, key, stdout, _, _ := startRunWith(t, map[string]string{
				"DATABASE_URL": testenv.MultiHostURL("payments", primary, standby),
				"RELAY_MODE":   mode,
			})
			waitForStatus(t, base+"/readyz", http.StatusOK)
			pay := func(idempotencyKey string) int {
				return httpDo(t, http.MethodPost, base+"/payments", `{"user_id": "u-42", "amount": 1999, "currency": "EUR"}`,
					map[string]string{"Content-Type": "application/json", "Idempotency-Key": idempotencyKey, "Authorization": "Bearer " + key}).StatusCode
			}
			if got := pay("before"); got != http.StatusCreated {
				t.Fatalf("POST /payments before the crash: status %d, want 201", got)
			}

			if err := primary.Crash(ctx); err != nil {
				t.Fatal(err)
			}
			waitForStatus(t, base+"/readyz", http.StatusServiceUnavailable)
			// And it stays so: the standby answers, but it is no primary, and a pool that
			// took any server that answers would be ready on it within a probe or two.
			tick := time.NewTicker(100 * time.Millisecond)
			for probe := range 10 {
				<-tick.C
				if got := httpDo(t, http.MethodGet, base+"/readyz", "", nil).StatusCode; got != http.StatusServiceUnavailable {
					t.Fatalf("GET /readyz, probe %d with the primary down and the standby in recovery: status %d, want 503", probe, got)
				}
			}
			tick.Stop()
			if err := standby.Promote(ctx); err != nil {
				t.Fatal(err)
			}
			waitForStatus(t, base+"/readyz", http.StatusOK)
			created := httpDo(t, http.MethodPost, base+"/payments", `{"user_id": "u-43", "amount": 2999, "currency": "EUR"}`,
				map[string]string{"Content-Type": "application/json", "Idempotency-Key": "after", "Authorization": "Bearer " + key})
			if created.StatusCode != http.StatusCreated {
				t.Fatalf("POST /payments after the promotion: status %d, want 201; body %s", created.StatusCode, created.Body)
			}
			var p struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(created.Body, &p); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "published event of the payment made on the new primary", func() bool {
				var view struct {
					Event struct {
						Status string `json:"status"`
					} `json:"event"`
				}
				res := httpDo(t, http.MethodGet, base+"/payments/"+p.ID, "", bearer(key))
				return json.Unmarshal(res.Body, &view) == nil && view.Event.Status == "published"
			})

			metrics := httpDo(t, http.MethodGet, adminBase(t, stdout)+"/metrics", "", nil)
			if want := "\npostgres_primary_changes_total 1\n"; !bytes.Contains(metrics.Body, []byte(want)) {
				t.Errorf("GET /metrics lacks %q", strings.TrimSpace(want))
			}
			if !strings.Contains(stdout.String(), `"msg":"the PostgreSQL primary changed`) {
				t.Errorf("no log line saying the primary changed; output:\n%s", stdout)
			}
		})
	}
}
