package measure

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

func TestPairDatabasesAreMigratedApartAndDropped(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	adminURL := testenv.PostgresURL(t)
	env, err := benchenv.OpenPostgres(ctx, func(k string) string {
		if k == "DATABASE_URL" {
			return adminURL
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()

	var warn bytes.Buffer
	pollURL, cdcURL, drop, err := Bench{Env: env}.PairDatabases(ctx, "bench_test_pair", &warn)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{databaseOf(t, pollURL), databaseOf(t, cdcURL)}
	if names[0] == names[1] {
		t.Fatalf("both relays got database %s, want one each", names[0])
	}
	for _, u := range []string{pollURL, cdcURL} {
		pool, err := pgxpool.New(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		var migrated bool
		err = pool.QueryRow(ctx, `SELECT to_regclass('outbox_events') IS NOT NULL`).Scan(&migrated)
		pool.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !migrated {
			t.Errorf("%s has no outbox_events: not migrated", databaseOf(t, u))
		}
	}

	drop()
	var left int
	err = env.Admin.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = ANY($1)`, names).Scan(&left)
	if err != nil {
		t.Fatal(err)
	}
	if left != 0 || warn.Len() != 0 {
		t.Errorf("after drop: %d of databases %v left, warnings %q; want none", left, names, warn.String())
	}
}

func databaseOf(t *testing.T, dbURL string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}
