package deploy

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// TestStandbyPromoteAndRebuild drives `PG_NODES=2 postgres.sh` through a switchover
// and back to two nodes, from a private checkout on free ports (never the shared
// server): start gives a primary and a synchronous standby; the url follows promote to
// the standby, which has every committed row; a plain start then refuses to bring the
// old primary back as a second primary; rebuild makes it the new primary's synchronous
// standby. Before the promotion and after the rebuild, the standby is the only
// synchronous one: a logical replication connection, as the CDC relay opens, is not.
func TestStandbyPromoteAndRebuild(t *testing.T) {
	t.Parallel()
	env := append(freePortsEnv(t), "PG_NODES=2")
	script := filepath.Join(copyCheckout(t), "scripts", "stack", "postgres.sh")
	run := func(args ...string) string {
		t.Helper()
		out, err := runStackScript(t, env, script, args...)
		if err != nil {
			t.Fatalf("PG_NODES=2 postgres.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	t.Cleanup(func() {
		if out, err := runStackScript(t, env, script, "destroy"); err != nil {
			t.Errorf("postgres.sh destroy: %v\n%s", err, out)
		}
	})
	run("start")
	wantRoles := func(node1, node2 string) {
		t.Helper()
		out, _ := runStackScript(t, env, script, "status") // fails while a node is down
		for n, role := range []string{node1, node2} {
			if !regexp.MustCompile(fmt.Sprintf(`(?m)^postgres: node %d on 127\.0\.0\.1:\d+: %s$`, n+1, role)).MatchString(out) {
				t.Fatalf("postgres.sh status said:\n%s\nwant node %d %s", out, n+1, role)
			}
		}
	}
	wantRoles("primary", "standby")
	url := strings.TrimSpace(run("url"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exec := func(sql string) (server string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connect to %s: %v", url, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if err := conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication UNION ALL SELECT 'none' LIMIT 1`).Scan(&server); err != nil {
			t.Fatal(err)
		}
		return conn.PgConn().Conn().RemoteAddr().String() + " " + server
	}
	first := exec(`CREATE TABLE committed (n int); INSERT INTO committed VALUES (1)`)
	if !strings.HasSuffix(first, " sync") {
		t.Errorf("before the promotion: %s, want the primary's standby in sync replication", first)
	}
	wantOnlyStandbySync(t, ctx, url)

	run("promote")
	wantRoles("down", "primary")
	second := exec(`INSERT INTO committed VALUES (2)`)
	if strings.Fields(second)[0] == strings.Fields(first)[0] {
		t.Fatalf("after promote the url still reaches %s", second)
	}
	if out, err := runStackScript(t, append(env, "PG_NODES=1"), script, "start"); err == nil || !strings.Contains(out, "rebuild") {
		t.Fatalf("postgres.sh start of the old primary after a promotion: err %v, said:\n%s\nwant a refusal that names rebuild", err, out)
	}
	wantRoles("down", "primary")

	run("rebuild")
	wantRoles("standby", "primary")
	third := exec(`INSERT INTO committed VALUES (3)`)
	if third != strings.Fields(second)[0]+" sync" {
		t.Errorf("after rebuild: %s, want %s with its standby in sync replication", third, strings.Fields(second)[0])
	}
	wantOnlyStandbySync(t, ctx, url)
	node1 := ""
	for _, kv := range env {
		if port, ok := strings.CutPrefix(kv, "PGSTACK_PORT="); ok {
			node1 = "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable"
		}
	}
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		conn, err := pgx.Connect(ctx, node1)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close(ctx)
		var rows int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM committed`).Scan(&rows); err != nil {
			return false, err.Error()
		}
		return rows == 3, fmt.Sprintf("the rebuilt standby (node 1) has %d rows, want 3", rows)
	})

	// The plain stop stops the standby too: nothing of this checkout is left running.
	if out, err := runStackScript(t, append(env, "PG_NODES=1"), script, "stop"); err != nil {
		t.Fatalf("postgres.sh stop: %v\n%s", err, out)
	}
	wantRoles("down", "down")
}

// wantOnlyStandbySync opens a logical replication connection to the primary of url,
// streaming from a temporary slot as the CDC relay does, and checks that the primary
// waits for the standby alone: its walreceiver, application_name standby, is sync and
// the logical walsender async, not a candidate (sync or potential) whose flush
// feedback could acknowledge a commit the standby has not got.
func wantOnlyStandbySync(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	const reader = "outbox_cdc_relay"
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = reader
	repl, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("logical replication connection: %v", err)
	}
	defer repl.Close(context.WithoutCancel(ctx))
	slot, err := pglogrepl.CreateReplicationSlot(ctx, repl, "standby_test_reader", "test_decoding",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication})
	if err != nil {
		t.Fatalf("create a logical slot: %v", err)
	}
	start, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := pglogrepl.StartReplication(ctx, repl, slot.SlotName, start, pglogrepl.StartReplicationOptions{}); err != nil {
		t.Fatalf("stream from the logical slot: %v", err)
	}
	if err := pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{WALWritePosition: start}); err != nil {
		t.Fatalf("flush feedback: %v", err)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Both walsenders streaming, the states are settled: the primary has ranked them.
	var states map[string]string
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		rows, err := conn.Query(ctx, `SELECT application_name, sync_state FROM pg_stat_replication WHERE state = 'streaming'`)
		if err != nil {
			return false, err.Error()
		}
		states = map[string]string{}
		var name, state string
		_, err = pgx.ForEachRow(rows, []any{&name, &state}, func() error { states[name] = state; return nil })
		if err != nil {
			return false, err.Error()
		}
		return len(states) == 2, fmt.Sprintf("streaming walsenders on the primary: %v, want the standby and %s", states, reader)
	})
	want := map[string]string{"standby": "sync", reader: "async"}
	if diff := cmp.Diff(want, states); diff != "" {
		t.Errorf("pg_stat_replication sync_state by application_name (-want +got):\n%s", diff)
	}
}
