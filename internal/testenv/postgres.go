// Package testenv gives tests the real servers they run against: a PostgreSQL server
// with a fresh, migrated database per test, a Kafka broker with a topic per test, and an
// in-process Toxiproxy to break the network between them.
//
// Nothing here is a mock. When DATABASE_URL or KAFKA_BROKERS is unset, the helpers start
// the project's own native stack (scripts/stack) and leave it running for the next test
// binary; the scripts are idempotent and take file locks, so `go test ./...` running many
// packages at once shares one server of each kind.
package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dscourse/payments-outbox/internal/repo"
	"github.com/dscourse/payments-outbox/migrations"
)

// postgresStart runs scripts/stack/postgres.sh start at most once per test binary and
// returns the admin URL of the server.
var postgresStart = sync.OnceValues(func() (string, error) {
	if env := os.Getenv("DATABASE_URL"); env != "" {
		return env, nil
	}
	script, err := repo.StackScript("postgres.sh")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", script, "start").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("scripts/stack/postgres.sh start: %w\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, "bash", script, "url").Output()
	if err != nil {
		return "", fmt.Errorf("scripts/stack/postgres.sh url: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
})

// PostgresURL returns the admin URL of the test server: DATABASE_URL when it is set,
// otherwise the native cluster of scripts/stack/postgres.sh, started on first use.
// The role must be allowed to create databases.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u, err := postgresStart()
	if err != nil {
		tb.Fatalf("start PostgreSQL: %v", err)
	}
	return u
}

// NewDatabase creates an empty database of its own for this test, with the migration
// set applied, and returns its URL. The database is cloned from a template that is
// migrated once per set of migration files (its name carries their hash), so each call
// costs milliseconds and tests can run in parallel. The database is dropped when the
// test passes and kept, with its name logged, when it fails, for inspection.
func NewDatabase(tb testing.TB, set migrations.Set) string {
	tb.Helper()
	admin := PostgresURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	template, err := ensureTemplate(ctx, admin, set)
	if err != nil {
		tb.Fatalf("template database for %s: %v", set.Name(), err)
	}
	name := "test_" + set.Name() + "_" + randomHex(6)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("connect to %s: %v", admin, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template)); err != nil {
		tb.Fatalf("create database %s: %v", name, err)
	}
	dbURL := withDatabase(admin, name)
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("kept database %s for inspection: psql %q", name, dbURL)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			tb.Logf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		// WITH (FORCE) ends connections a test left open (a pool closed late).
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			tb.Logf("drop database %s: %v", name, err)
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

// templates remembers the templates this test binary already checked.
var templates sync.Map // template name -> struct{}

// ensureTemplate creates and migrates the template database of a migration set unless
// it exists. Test binaries run in parallel, so creation is serialised by an advisory
// lock on the admin database, and a template is created under a temporary name and
// renamed only once fully migrated: a template that exists is always complete.
func ensureTemplate(ctx context.Context, admin string, set migrations.Set) (string, error) {
	hash, err := hashFiles(set.Files())
	if err != nil {
		return "", err
	}
	name := "tpl_" + set.Name() + "_" + hash[:12]
	if _, ok := templates.Load(name); ok {
		return name, nil
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('testenv-templates'))"); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up %s: %w", name, err)
	}
	if !exists {
		building := name + "_building"
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", building)); err != nil {
			return "", err
		}
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+building); err != nil {
			return "", fmt.Errorf("create %s: %w", building, err)
		}
		if err := migrate(ctx, withDatabase(admin, building), set); err != nil {
			return "", err
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
			return "", fmt.Errorf("rename %s: %w", building, err)
		}
	}
	templates.Store(name, struct{}{})
	return name, nil
}

func migrate(ctx context.Context, dbURL string, set migrations.Set) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := set.Up(ctx, db); err != nil {
		return err
	}
	return closeAll(db)
}

// closeAll closes the connections of db: a database can only serve as a template
// while nobody is connected to it.
func closeAll(db *sql.DB) error {
	db.SetMaxIdleConns(0)
	return db.Close()
}

func hashFiles(fsys fs.FS) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// withDatabase returns the URL with its database name replaced.
func withDatabase(rawURL, name string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(errors.New("testenv: unparseable database URL: " + rawURL))
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
