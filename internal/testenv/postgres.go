// Package testenv gives tests the real servers they run against: a PostgreSQL server
// with a fresh, migrated database per test, a Kafka broker with a topic per test, and an
// in-process Toxiproxy to break the network between them.
//
// Nothing here is a mock. The work is done by internal/devstack; this package adds what
// a test needs around it: a failed set-up fails the test, and what a test made is
// removed when it ends. When DATABASE_URL or KAFKA_BROKERS is unset, the native stack
// (scripts/stack) is started on first use and left running for the next test binary;
// the scripts are idempotent and take file locks, so `go test ./...` running many
// packages at once shares one server of each kind.
package testenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/migrations"
)

// PostgresURL returns the admin URL of the test server: DATABASE_URL when it is set,
// otherwise the native cluster of scripts/stack/postgres.sh, started on first use.
// The role must be allowed to create databases.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u, err := devstack.PostgresURL(os.Getenv)
	if err != nil {
		tb.Fatalf("PostgreSQL for tests: %v", err)
	}
	return u
}

// NewDatabase creates an empty database of its own for this test, with the migration
// set applied, and returns its URL. The database is cloned from a template migrated
// once per set of migration files (devstack.EnsureTemplate), so each call costs
// milliseconds and tests can run in parallel. The database is dropped when the test
// passes and kept, with its name logged, when it fails, for inspection.
func NewDatabase(tb testing.TB, set migrations.Set) string {
	tb.Helper()
	admin := PostgresURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	template, err := devstack.EnsureTemplate(ctx, admin, set)
	if err != nil {
		tb.Fatalf("template database for %s: %v", set.Name(), err)
	}
	name := devstack.UniqueName("test_" + set.Name() + "_")
	dbURL, err := devstack.CloneDatabase(ctx, admin, name, template)
	if err != nil {
		tb.Fatalf("database for the test: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("kept database %s for inspection: psql %q", name, dbURL)
			return
		}
		// The test's context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := devstack.DropDatabase(ctx, admin, name); err != nil {
			tb.Logf("%v", err)
		}
	})
	return dbURL
}

// NewPool is NewDatabase plus a pgx pool on it, closed when the test ends.
func NewPool(tb testing.TB, set migrations.Set) *pgxpool.Pool {
	tb.Helper()
	dbURL := NewDatabase(tb, set)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		tb.Fatalf("open pool on %s: %v", dbURL, err)
	}
	tb.Cleanup(pool.Close)
	return pool
}
