// Package benchenv is what every benchmark of cmd/bench runs on, set up in one place.
// Start at Run: it parses a benchmark's flags, opens the servers with Open and runs the
// benchmark on them. Open opens the PostgreSQL server through its admin database and the
// Kafka broker (starting the native servers that are not running), and its Env makes the
// throwaway databases and topics a benchmark works in and removes them when it is done.
//
// Beside it: the outbox rows a benchmark starts from (FillBacklog, FillHistory) and the
// outbox's size (OutboxSizes), the only code of the benchmarks that knows the outbox's
// schema; Settle, which brings the server to the same quiet state before each latency
// measurement; NoFlags and LoadAverage.
package benchenv

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/migrations"
)

// Env is the servers of a run. The benchmarks' own types embed it, so that b.Admin,
// b.Brokers and b.CreateTopic are the run's; a copy with another broker's fields
// (the relay benchmark's cluster) creates its topics on that broker.
type Env struct {
	// AdminURL is DATABASE_URL or the native stack's: an admin URL, since every
	// benchmark creates and drops databases of its own.
	AdminURL string
	// Admin is a pool on the admin database, for the server's statistics and views;
	// never for a benchmark's tables.
	Admin *pgxpool.Pool
	// Brokers is KAFKA_BROKERS or the native stack's direct listener, kafka a client on
	// them and adm its admin client. All three are nil from OpenPostgres.
	Brokers []string
	Kafka   *kgo.Client
	Adm     *kadm.Client
}

// Run is the start of every benchmark on PostgreSQL and Kafka: it parses args with
// parse (whose -h prints to stdout), opens the servers with Open and opts, runs body on
// them and closes the clients. A flag error stops it before any server is opened.
func Run[C any](ctx context.Context, args []string, getenv func(string) string, stdout io.Writer,
	parse func(args []string, stdout io.Writer) (C, error), body func(env Env, cfg C) error, opts ...kgo.Opt) error {
	cfg, err := parse(args, stdout)
	if err != nil {
		return err
	}
	env, err := Open(ctx, getenv, opts...)
	if err != nil {
		return err
	}
	defer env.Close()
	return body(env, cfg)
}

// OpenPostgres opens the PostgreSQL side only, for a benchmark without Kafka (the
// ladder). It starts the native PostgreSQL when DATABASE_URL is unset and it is not
// running.
func OpenPostgres(ctx context.Context, getenv func(string) string) (Env, error) {
	adminURL, err := devstack.PostgresURL(getenv)
	if err != nil {
		return Env{}, err
	}
	admin, err := pgxpool.New(ctx, adminURL)
	if err != nil {
		return Env{}, fmt.Errorf("open admin pool: %w", err)
	}
	return Env{AdminURL: adminURL, Admin: admin}, nil
}

// Open opens PostgreSQL and Kafka, starting the native servers that are needed and
// not running. opts are added to the Kafka client's options (the consumer benchmark
// produces its records on it).
func Open(ctx context.Context, getenv func(string) string, opts ...kgo.Opt) (Env, error) {
	e, err := OpenPostgres(ctx, getenv)
	if err != nil {
		return Env{}, err
	}
	if e.Brokers, err = devstack.KafkaBrokers(getenv); err != nil {
		e.Close()
		return Env{}, err
	}
	if e.Kafka, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.Brokers...)}, opts...)...); err != nil {
		e.Close()
		return Env{}, fmt.Errorf("new Kafka client: %w", err)
	}
	e.Adm = kadm.NewClient(e.Kafka)
	return e, nil
}

// Close closes the clients; the servers keep running.
func (e Env) Close() {
	if e.Kafka != nil {
		e.Kafka.Close()
	}
	e.Admin.Close()
}

// CreateDatabase creates an empty database named prefix_<random> on the server and
// returns its URL and a function that drops it. A benchmark that fails to drop leaves
// only a throwaway database behind, so the drop's error is not reported.
func (e Env) CreateDatabase(ctx context.Context, prefix string) (string, func(), error) {
	name := devstack.UniqueName(prefix + "_")
	dbURL, err := devstack.CreateDatabase(ctx, e.AdminURL, name)
	if err != nil {
		return "", nil, err
	}
	return dbURL, cleanup(func(ctx context.Context) error { return devstack.DropDatabase(ctx, e.AdminURL, name) }), nil
}

// MigratedDatabase is CreateDatabase with set applied.
func (e Env) MigratedDatabase(ctx context.Context, prefix string, set migrations.Set) (string, func(), error) {
	dbURL, drop, err := e.CreateDatabase(ctx, prefix)
	if err != nil {
		return "", nil, err
	}
	if err := devstack.MigrateDatabase(ctx, dbURL, set); err != nil {
		drop()
		return "", nil, err
	}
	return dbURL, drop, nil
}

// MigratedPool is MigratedDatabase with a pool of at most maxConns connections on it (0:
// pgxpool's default). The returned function closes the pool and drops the database.
func (e Env) MigratedPool(ctx context.Context, prefix string, set migrations.Set, maxConns int32) (*pgxpool.Pool, func(), error) {
	dbURL, drop, err := e.MigratedDatabase(ctx, prefix, set)
	if err != nil {
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

// CreateTopic creates a topic named prefix.<random> with 3 partitions, like
// payments.events, waits until every partition has a leader, and returns its name and a
// function that deletes it.
func (e Env) CreateTopic(ctx context.Context, prefix string) (string, func(), error) {
	name := devstack.UniqueName(prefix + ".")
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := devstack.CreateTopic(ctx, e.Adm, name, 3); err != nil {
		return "", nil, err
	}
	return name, cleanup(func(ctx context.Context) error { return devstack.DeleteTopic(ctx, e.Adm, name) }), nil
}

// cleanup makes remove a function for a benchmark to defer. It runs on a context of its
// own, bounded by 30 s, since the benchmark's may have ended (an interrupted run still
// cleans up), and its error is dropped: what it fails to remove is a throwaway.
func cleanup(remove func(ctx context.Context) error) func() {
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = remove(ctx)
	}
}

// ExecOnce runs sql on a connection of its own to dbURL.
func ExecOnce(ctx context.Context, dbURL, sql string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, sql)
	return err
}

// ResetStatements creates pg_stat_statements in dbURL's database (dropped with it) and
// forgets that database's statements, leaving other databases' alone: the figures a
// benchmark prints afterwards are its own.
func ResetStatements(ctx context.Context, dbURL string) error {
	err := ExecOnce(ctx, dbURL, `
		CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
		SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)`)
	if err != nil {
		return fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	return nil
}
