package devstack

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dscourse/payments-outbox/migrations"
)

// UniqueName returns prefix followed by 8 random hex digits, to name the throwaway
// databases, topics and consumer groups of one run so that runs never share one.
func UniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails (crypto/rand's documented contract since Go 1.24)
	return prefix + hex.EncodeToString(b)
}

// DatabaseURL returns adminURL with its database name replaced by name.
func DatabaseURL(adminURL, name string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", fmt.Errorf("parse PostgreSQL URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// CreateDatabase creates the empty database name on the server of adminURL and returns
// its URL.
func CreateDatabase(ctx context.Context, adminURL, name string) (string, error) {
	return createDatabase(ctx, adminURL, name, "")
}

// CloneDatabase creates database name as a copy of template, which nobody may be
// connected to, and returns its URL. Copying a migrated template takes milliseconds
// where migrating takes a second.
func CloneDatabase(ctx context.Context, adminURL, name, template string) (string, error) {
	return createDatabase(ctx, adminURL, name, template)
}

func createDatabase(ctx context.Context, adminURL, name, template string) (string, error) {
	dbURL, err := DatabaseURL(adminURL, name)
	if err != nil {
		return "", err
	}
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if err := execAdmin(ctx, adminURL, stmt); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return dbURL, nil
}

// DropDatabase drops database name if it exists. WITH (FORCE) ends the connections a
// run left open (a pool closed late, a killed service).
func DropDatabase(ctx context.Context, adminURL, name string) error {
	if err := execAdmin(ctx, adminURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// MigrateDatabase applies the migration set to the database at dbURL and closes every
// connection it opened: a database can serve as a template only while nobody is
// connected to it.
func MigrateDatabase(ctx context.Context, dbURL string, set migrations.Set) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return fmt.Errorf("parse database URL: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := set.Up(ctx, db); err != nil {
		return fmt.Errorf("migrate %s: %w", cfg.Database, err)
	}
	return closeAll(db)
}

// closeAll closes db after making it drop its idle connections at once.
func closeAll(db *sql.DB) error {
	db.SetMaxIdleConns(0)
	if err := db.Close(); err != nil {
		return fmt.Errorf("close migration connections: %w", err)
	}
	return nil
}

// EnsureTemplate returns the name of a database that holds the migration set and only
// that, for CloneDatabase, creating it if it does not exist yet. Its name carries a hash
// of the set's files, so a changed migration gets a new template.
//
// Test binaries run in parallel, so creation is serialised by an advisory lock on the
// admin database, and a template is built under a temporary name and renamed only once
// fully migrated: a template that exists is always complete.
func EnsureTemplate(ctx context.Context, adminURL string, set migrations.Set) (string, error) {
	hash, err := hashFiles(set.Files())
	if err != nil {
		return "", err
	}
	name := "tpl_" + set.Name() + "_" + hash[:12]
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	// Unlocked on Close: an advisory lock belongs to its session.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('devstack-templates'))"); err != nil {
		return "", fmt.Errorf("lock templates: %w", err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template %s: %w", name, err)
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if err := DropDatabase(ctx, adminURL, building); err != nil {
		return "", err
	}
	buildingURL, err := CreateDatabase(ctx, adminURL, building)
	if err != nil {
		return "", err
	}
	if err := MigrateDatabase(ctx, buildingURL, set); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("rename template %s: %w", building, err)
	}
	return name, nil
}

// hashFiles hashes the names and contents of every file in fsys.
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

// execAdmin runs one statement on a connection of its own to the admin database:
// CREATE and DROP DATABASE cannot run inside a transaction or a pooled session.
func execAdmin(ctx context.Context, adminURL, stmt string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, stmt)
	return err
}
