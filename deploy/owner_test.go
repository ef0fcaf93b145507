package deploy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

// TestPostgresOnOtherPortsFromAPrivateCheckout starts a PostgreSQL of this test's own,
// on free ports (never the shared server), from a checkout in a private directory: run
// as root, the postgres user cannot enter it, so the data directory moves to /tmp and
// nothing under the checkout tells which checkout the server belongs to. Then:
// devstack finds the server from the port variables alone; a second checkout recognises
// it as the first one's, hands `restart` to the first one's script, which restarts it
// (the db-restart scenario's path), and will not stop it.
func TestPostgresOnOtherPortsFromAPrivateCheckout(t *testing.T) {
	t.Parallel()
	env := freePortsEnv(t)
	getenv := func(name string) string {
		for _, kv := range env {
			if n, v, _ := strings.Cut(kv, "="); n == name {
				return v
			}
		}
		return ""
	}
	owner, second := copyCheckout(t), copyCheckout(t)
	ownerScript := filepath.Join(owner, "scripts", "stack", "postgres.sh")
	secondScript := filepath.Join(second, "scripts", "stack", "postgres.sh")
	t.Cleanup(func() {
		if out, err := runStackScript(t, env, ownerScript, "destroy"); err != nil {
			t.Errorf("postgres.sh destroy: %v\n%s", err, out)
		}
	})
	if out, err := runStackScript(t, env, ownerScript, "start"); err != nil {
		t.Fatalf("postgres.sh start: %v\n%s", err, out)
	}

	// The test's own checkout starts nothing: the server on PGSTACK_PORT is the owner's.
	url, err := devstack.PostgresURL(getenv)
	if err != nil {
		t.Fatalf("devstack.PostgresURL with %s: %v", getenv("PGSTACK_PORT"), err)
	}
	if want := "127.0.0.1:" + getenv("PGSTACK_PORT"); !strings.Contains(url, want) {
		t.Errorf("devstack.PostgresURL = %q, want the server at %s", url, want)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	recorded, dataDir, started := serverState(ctx, t, url)
	if recorded != owner {
		t.Errorf("payments_outbox.owner = %q, want the checkout that started it, %s", recorded, owner)
	}
	// What this test is for: state outside the checkout, where no path names the owner.
	if os.Geteuid() == 0 && strings.HasPrefix(dataDir, owner) {
		t.Errorf("data directory %s is inside the private checkout, which the postgres user cannot enter", dataDir)
	}

	for _, verb := range []string{"status", "start"} {
		out, err := runStackScript(t, env, secondScript, verb)
		if err != nil || !strings.Contains(out, "started from "+owner+":") {
			t.Errorf("postgres.sh %s in a second checkout: err %v, said:\n%s\nwant it to name %s", verb, err, out, owner)
		}
	}
	if out, err := runStackScript(t, env, secondScript, "restart"); err != nil {
		t.Fatalf("postgres.sh restart in a second checkout: %v\n%s", err, out)
	}
	if _, _, again := serverState(ctx, t, url); !again.After(started) {
		t.Errorf("server start time after a restart from the second checkout = %s, want later than %s", again, started)
	}
	if out, err := runStackScript(t, env, secondScript, "stop"); err != nil || !strings.Contains(out, "will not stop it") {
		t.Errorf("postgres.sh stop in a second checkout: err %v, said:\n%s\nwant it to leave the server running", err, out)
	}
	serverState(ctx, t, url) // fails the test if the server is down

	// Nothing of the server lives in the second checkout.
	entries, _ := os.ReadDir(filepath.Join(second, ".stack"))
	if i := slices.IndexFunc(entries, func(e os.DirEntry) bool { return e.Name() == "postgres" }); i >= 0 {
		t.Errorf("the second checkout has .stack/postgres: it made a data directory of its own")
	}
}

// serverState returns the server's owner record, its data directory and the time its
// postmaster started.
func serverState(ctx context.Context, t *testing.T, url string) (owner, dataDir string, started time.Time) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, "SELECT current_setting('payments_outbox.owner', true), current_setting('data_directory'), pg_postmaster_start_time()").Scan(&owner, &dataDir, &started)
	if err != nil {
		t.Fatalf("read the server's state: %v", err)
	}
	return owner, dataDir, started
}
