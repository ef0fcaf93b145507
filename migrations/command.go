package migrations

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// UpPool is Up through a pgx pool. goose speaks database/sql, so this borrows the
// pool's connections through a *sql.DB; closing that leaves the pool open.
func (s Set) UpPool(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return s.Up(ctx, db)
}

// Command is the `migrate` subcommand of a service: apply the set and exit. Services
// apply their migrations at start too; this is for deploy pipelines and `make migrate`.
//
//	<service> migrate [--database-url postgres://...]   (default $DATABASE_URL)
func (s Set) Command(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, logger *slog.Logger) error {
	flags := flag.NewFlagSet("migrate", flag.ContinueOnError)
	flags.SetOutput(stdout)
	databaseURL := flags.String("database-url", getenv("DATABASE_URL"), "the "+s.name+" database (default $DATABASE_URL)")
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
	if err := s.UpPool(ctx, pool); err != nil {
		return err
	}
	logger.Info("migrations applied", slog.String("set", s.name))
	return nil
}
