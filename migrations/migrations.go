// Package migrations holds every table of the project as goose SQL files, embedded in
// the binaries, and applies them.
//
// The payments service (cmd/api) and the antifraud consumer (cmd/consumer) own separate
// databases. Each has its own folder of migrations and its own goose version table, so
// the two never collide even when pointed at one database.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed payments/*.sql
var paymentsFS embed.FS

//go:embed antifraud/*.sql
var antifraudFS embed.FS

// A Set is one service's migrations and the table goose records them in.
type Set struct {
	name         string
	files        fs.FS
	versionTable string
}

var (
	// Payments are the tables of cmd/api: payments, idempotency keys, the outbox.
	Payments = Set{name: "payments", files: sub(paymentsFS, "payments"), versionTable: "goose_db_version"}
	// Antifraud are the tables of cmd/consumer: processed events, decisions, running
	// totals, dead letters.
	Antifraud = Set{name: "antifraud", files: sub(antifraudFS, "antifraud"), versionTable: "goose_db_version_antifraud"}
)

func sub(fsys embed.FS, dir string) fs.FS {
	s, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err) // the directory is embedded above; this cannot fail at run time
	}
	return s
}

// Name is the set's name, for logs.
func (s Set) Name() string { return s.name }

// Files are the embedded SQL files; tests hash them to name template databases.
func (s Set) Files() fs.FS { return s.files }

// Up applies every pending migration of the set. It holds a Postgres advisory lock
// for the whole run, so several replicas starting at once apply each migration once.
func (s Set) Up(ctx context.Context, db *sql.DB) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migrations %s: new locker: %w", s.name, err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, s.files,
		goose.WithSessionLocker(locker),
		goose.WithTableName(s.versionTable),
	)
	if err != nil {
		return fmt.Errorf("migrations %s: new provider: %w", s.name, err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("migrations %s: up: %w", s.name, err)
	}
	return nil
}
