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
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for goose
	"github.com/twmb/franz-go/pkg/kadm"

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

// kafkaBrokers is KAFKA_BROKERS, or the native stack's direct listener.
func kafkaBrokers(getenv func(string) string) []string {
	return strings.Split(cmp.Or(getenv("KAFKA_BROKERS"), "127.0.0.1:19092"), ",")
}

// randomHex returns n random bytes in hex, to name throwaway databases, topics and groups.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// createDatabase creates an empty database named prefix_<random> next to adminURL's and
// returns its URL and a function that drops it.
func createDatabase(ctx context.Context, adminURL, prefix string) (string, func(), error) {
	name := prefix + "_" + randomHex(4)
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	u.Path = "/" + name
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", adminURL, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
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
	return u.String(), drop, nil
}

// migrateDatabase applies set to the database at dbURL.
func migrateDatabase(ctx context.Context, dbURL string, set migrations.Set) error {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return fmt.Errorf("open %s: %w", dbURL, err)
	}
	defer db.Close()
	return set.Up(ctx, db)
}

// migratedPool creates a database (createDatabase), applies set to it and opens a pool of
// at most maxConns connections on it (0: pgxpool's default). The returned function closes
// the pool and drops the database.
func migratedPool(ctx context.Context, adminURL, prefix string, set migrations.Set, maxConns int32) (*pgxpool.Pool, func(), error) {
	dbURL, drop, err := createDatabase(ctx, adminURL, prefix)
	if err != nil {
		return nil, nil, err
	}
	if err := migrateDatabase(ctx, dbURL, set); err != nil {
		drop()
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("parse database URL: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("open pool: %w", err)
	}
	return pool, func() { pool.Close(); drop() }, nil
}

// createTopic creates a topic named prefix.<random> with 3 partitions, like
// payments.events, waits until every partition has a leader, and returns its name and a
// function that deletes it.
func createTopic(ctx context.Context, adm *kadm.Client, prefix string) (string, func(), error) {
	name := prefix + "." + randomHex(4)
	resp, err := adm.CreateTopic(ctx, 3, -1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return "", nil, fmt.Errorf("create topic %s: %w", name, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopic(ctx, name)
	}
	// The broker serves a new topic a moment after the controller commits it.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		details, err := adm.ListTopics(ctx, name)
		if err == nil && details.Error() == nil && len(details[name].Partitions) == 3 && details[name].Partitions.NumReplicas() > 0 {
			return name, drop, nil
		}
		select {
		case <-ctx.Done():
			drop()
			return "", nil, fmt.Errorf("topic %s has no leaders: %w", name, ctx.Err())
		case <-tick.C:
		}
	}
}

// tenths and hundredths round f to one or two decimals for the report.
func tenths(f float64) float64     { return math.Round(f*10) / 10 }
func hundredths(f float64) float64 { return math.Round(f*100) / 100 }
