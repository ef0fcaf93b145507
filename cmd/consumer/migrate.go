package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dscourse/payments-outbox/migrations"
)

// runMigrate is the migrate subcommand: apply the antifraud migrations and exit.
// serve applies them at start too; this is for deploy pipelines and make migrate.
func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, logger *slog.Logger) error {
	flags := flag.NewFlagSet("migrate", flag.ContinueOnError)
	flags.SetOutput(stdout)
	databaseURL := flags.String("database-url", getenv("DATABASE_URL"), "the antifraud database (default $DATABASE_URL)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *databaseURL == "" {
		return fmt.Errorf("migrate: no database: pass --database-url postgres://... or set DATABASE_URL")
	}
	pool, err := pgxpool.New(ctx, *databaseURL)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	if err := migrate(ctx, pool); err != nil {
		return err
	}
	logger.Info("migrations applied", slog.String("set", migrations.Antifraud.Name()))
	return nil
}

// migrate applies the antifraud migrations through pool. They have their own goose
// version table, so pointing the consumer at the payments database by mistake does not
// mix the two services' histories.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	// goose speaks database/sql; this *sql.DB borrows the pool's connections, and
	// closing it leaves the pool open.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrations.Antifraud.Up(ctx, db); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
