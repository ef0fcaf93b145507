package main

// What every benchmark runs on, opened in one place: the PostgreSQL server through its
// admin database, the Kafka broker, and the throwaway databases and topics each
// benchmark makes on them and removes when it is done.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/migrations"
)

// benchEnv is the servers of a run. The benchmarks' own types embed it, so that b.admin,
// b.brokers and b.createTopic are the run's; a copy with another broker's fields
// (relay_cluster.go) creates its topics on that broker.
type benchEnv struct {
	// adminURL is DATABASE_URL or the native stack's: an admin URL, since every
	// benchmark creates and drops databases of its own.
	adminURL string
	// admin is a pool on the admin database, for the server's statistics and views;
	// never for a benchmark's tables.
	admin *pgxpool.Pool
	// brokers is KAFKA_BROKERS or the native stack's direct listener, kafka a client on
	// them and adm its admin client. All three are nil from openPostgres.
	brokers []string
	kafka   *kgo.Client
	adm     *kadm.Client
}

// openPostgres opens the PostgreSQL side only, for a benchmark without Kafka (the
// ladder). It starts the native PostgreSQL when DATABASE_URL is unset and it is not
// running.
func openPostgres(ctx context.Context, getenv func(string) string) (benchEnv, error) {
	adminURL, err := devstack.PostgresURL(getenv)
	if err != nil {
		return benchEnv{}, err
	}
	admin, err := pgxpool.New(ctx, adminURL)
	if err != nil {
		return benchEnv{}, fmt.Errorf("open admin pool: %w", err)
	}
	return benchEnv{adminURL: adminURL, admin: admin}, nil
}

// openEnv opens PostgreSQL and Kafka, starting the native servers that are needed and
// not running. opts are added to the Kafka client's options (the consumer benchmark
// produces its records on it).
func openEnv(ctx context.Context, getenv func(string) string, opts ...kgo.Opt) (benchEnv, error) {
	e, err := openPostgres(ctx, getenv)
	if err != nil {
		return benchEnv{}, err
	}
	if e.brokers, err = devstack.KafkaBrokers(getenv); err != nil {
		e.close()
		return benchEnv{}, err
	}
	if e.kafka, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.brokers...)}, opts...)...); err != nil {
		e.close()
		return benchEnv{}, fmt.Errorf("new Kafka client: %w", err)
	}
	e.adm = kadm.NewClient(e.kafka)
	return e, nil
}

// close closes the clients; the servers keep running.
func (e benchEnv) close() {
	if e.kafka != nil {
		e.kafka.Close()
	}
	e.admin.Close()
}

// createDatabase creates an empty database named prefix_<random> on the server and
// returns its URL and a function that drops it. A benchmark that fails to drop leaves
// only a throwaway database behind, so the drop's error is not reported.
func (e benchEnv) createDatabase(ctx context.Context, prefix string) (string, func(), error) {
	name := devstack.UniqueName(prefix + "_")
	dbURL, err := devstack.CreateDatabase(ctx, e.adminURL, name)
	if err != nil {
		return "", nil, err
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = devstack.DropDatabase(ctx, e.adminURL, name)
	}
	return dbURL, drop, nil
}

// migratedDatabase is createDatabase with set applied.
func (e benchEnv) migratedDatabase(ctx context.Context, prefix string, set migrations.Set) (string, func(), error) {
	dbURL, drop, err := e.createDatabase(ctx, prefix)
	if err != nil {
		return "", nil, err
	}
	if err := devstack.MigrateDatabase(ctx, dbURL, set); err != nil {
		drop()
		return "", nil, err
	}
	return dbURL, drop, nil
}

// migratedPool is migratedDatabase with a pool of at most maxConns connections on it (0:
// pgxpool's default). The returned function closes the pool and drops the database.
func (e benchEnv) migratedPool(ctx context.Context, prefix string, set migrations.Set, maxConns int32) (*pgxpool.Pool, func(), error) {
	dbURL, drop, err := e.migratedDatabase(ctx, prefix, set)
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

// createTopic creates a topic named prefix.<random> with 3 partitions, like
// payments.events, waits until every partition has a leader, and returns its name and a
// function that deletes it.
func (e benchEnv) createTopic(ctx context.Context, prefix string) (string, func(), error) {
	name := devstack.UniqueName(prefix + ".")
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := devstack.CreateTopic(ctx, e.adm, name, 3); err != nil {
		return "", nil, err
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = devstack.DeleteTopic(ctx, e.adm, name)
	}
	return name, drop, nil
}

// execOnce runs sql on a connection of its own to dbURL.
func execOnce(ctx context.Context, dbURL, sql string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, sql)
	return err
}
