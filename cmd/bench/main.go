// Command bench measures the service on the native stack and merges the figures into
// reports/bench.json. It is a benchmark, not a test: it takes minutes and its numbers
// depend on the machine.
//
//	go run ./cmd/bench api        the API's write rate against the database's own ceiling
//	go run ./cmd/bench relay      the relay's drain rate and commit-to-Kafka latency
//	go run ./cmd/bench all        every benchmark, in name order
//
// PostgreSQL is DATABASE_URL (an admin URL; each benchmark creates its own databases)
// or the native stack's (make bench starts it); Kafka is KAFKA_BROKERS or the native
// stack's direct listener.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for goose

	"github.com/dscourse/payments-outbox/migrations"
)

// A benchmark measures one thing, prints what it found to stdout and merges its
// figures into reports/bench.json (internal/benchreport). It reads DATABASE_URL (an
// admin URL: it creates databases of its own) and KAFKA_BROKERS through getenv.
type benchmark func(ctx context.Context, getenv func(string) string, stdout io.Writer) error

// benchmarks are the subcommands. A new benchmark is a file with its function and one
// line here.
func benchmarks() map[string]benchmark {
	return map[string]benchmark{
		"api":      benchAPI,
		"consumer": benchConsumer,
		"relay":    benchRelay,
	}
}

func main() {
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	all := benchmarks()
	names := slices.Sorted(maps.Keys(all))
	if len(args) != 2 {
		return fmt.Errorf("usage: bench %s|all", strings.Join(names, "|"))
	}
	selected := []string{args[1]}
	if args[1] == "all" {
		selected = names
	} else if all[args[1]] == nil {
		return fmt.Errorf("unknown benchmark %q: choose one of %s, or all", args[1], strings.Join(names, ", "))
	}
	for _, name := range selected {
		fmt.Fprintf(stdout, "== bench %s\n", name)
		if err := all[name](ctx, getenv, stdout); err != nil {
			return fmt.Errorf("benchmark %s: %w", name, err)
		}
	}
	return nil
}

// adminPostgresURL is DATABASE_URL, or the native stack's admin URL.
func adminPostgresURL(ctx context.Context, getenv func(string) string) (string, error) {
	if u := getenv("DATABASE_URL"); u != "" {
		return u, nil
	}
	out, err := exec.CommandContext(ctx, "bash", "scripts/stack/postgres.sh", "url").Output()
	if err != nil {
		return "", fmt.Errorf("ask scripts/stack/postgres.sh for the URL (run from the repository root, after make stack-up, or set DATABASE_URL): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// createDatabase creates an empty database named prefix_<random> and returns its URL
// and a function that drops it.
func createDatabase(ctx context.Context, adminURL, prefix string) (string, func(), error) {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := prefix + "_" + hex.EncodeToString(suffix)
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", adminURL, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	cfg, err := pgx.ParseConfig(adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("parse %s: %w", adminURL, err)
	}
	dbURL := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return dbURL, drop, nil
}

// migrateDatabase applies the payments migrations to the database at dbURL.
func migrateDatabase(ctx context.Context, dbURL string) error {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return fmt.Errorf("open %s: %w", dbURL, err)
	}
	defer db.Close()
	return migrations.Payments.Up(ctx, db)
}
