package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// chaos prepare prints empty databases and a fresh topic of 3 partitions as shell
// assignments, and prepare -drop removes all three.
func TestPrepareMakesAndDropsARun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"prepare"}, os.Getenv, &out); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+)='([^']*)'$`).FindAllStringSubmatch(out.String(), -1) {
		vars[m[1]] = m[2]
	}
	for _, name := range []string{"NAME", "PAYMENTS_DB", "CONSUMER_DB", "TOPIC", "RELAY_BROKERS", "CONSUMER_BROKERS"} {
		if vars[name] == "" {
			t.Fatalf("prepare printed no %s; output:\n%s", name, out.String())
		}
	}
	dropped := false
	t.Cleanup(func() {
		if !dropped {
			_ = run(context.Background(), []string{"prepare", "-drop", vars["NAME"]}, os.Getenv, &bytes.Buffer{})
		}
	})

	for _, db := range []string{vars["PAYMENTS_DB"], vars["CONSUMER_DB"]} {
		if n := tableCount(ctx, t, db); n != 0 {
			t.Errorf("database %s has %d tables, want an empty one", db, n)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(vars["CONSUMER_BROKERS"]))
	if err != nil {
		t.Fatalf("new Kafka client: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx, vars["TOPIC"])
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	if got, want := len(topics[vars["TOPIC"]].Partitions), 3; got != want { // docs/contract.md
		t.Errorf("topic %s has %d partitions, want %d", vars["TOPIC"], got, want)
	}

	if err := run(ctx, []string{"prepare", "-drop", vars["NAME"]}, os.Getenv, &bytes.Buffer{}); err != nil {
		t.Fatalf("prepare -drop: %v", err)
	}
	dropped = true
	if conn, err := pgx.Connect(ctx, vars["PAYMENTS_DB"]); err == nil {
		conn.Close(ctx)
		t.Errorf("database %s still exists after prepare -drop", vars["PAYMENTS_DB"])
	}
	// The broker deletes a topic asynchronously: its metadata may list it for a moment.
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		topics, err := adm.ListTopics(ctx, vars["TOPIC"])
		return err == nil && !topics.Has(vars["TOPIC"]), fmt.Sprintf("topic %s still listed after prepare -drop (err %v)", vars["TOPIC"], err)
	})
}

// tableCount counts the tables of the public schema of the database at dbURL.
func tableCount(ctx context.Context, t *testing.T, dbURL string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect %s: %v", dbURL, err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil {
		t.Fatalf("count tables: %v", err)
	}
	return n
}
