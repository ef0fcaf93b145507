package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/migrations"
)

// keysUsage is how the keys command is called.
const keysUsage = `api keys create --merchant NAME [--database-url URL]   create a key (and the merchant), print it once
api keys revoke ID [--database-url URL]                 revoke a key; it stops working within API_KEY_CACHE_TTL (5s)`

// runKeys is the keys command: it creates or revokes a merchant's API key in the
// payments database (DATABASE_URL, or --database-url), migrating it first. create
// prints one JSON line, {"key_id", "merchant_id", "merchant", "api_key"}: the key is
// shown this once and stored only as its hash.
func runKeys(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("keys: say create or revoke:\n" + keysUsage)
	}
	flags := flag.NewFlagSet("keys "+args[0], flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	databaseURL := flags.String("database-url", getenv("DATABASE_URL"), "the payments database (default $DATABASE_URL)")
	name := flags.String("merchant", "", "the merchant's name (create)")
	// The key id of revoke comes first, the flags after it (flag stops at the first
	// argument that is not one).
	rest := args[1:]
	var id string
	if args[0] == "revoke" && len(rest) > 0 && rest[0] != "" && rest[0][0] != '-' {
		id, rest = rest[0], rest[1:]
	}
	if err := flags.Parse(rest); err != nil {
		return fmt.Errorf("keys %s: %w\n%s", args[0], err, keysUsage)
	}
	if *databaseURL == "" {
		return errors.New("keys: no database: pass --database-url postgres://... or set DATABASE_URL")
	}
	switch {
	case args[0] == "create" && *name == "":
		return errors.New("keys create: --merchant NAME is required")
	case args[0] == "revoke" && id == "":
		return errors.New("keys revoke: give the key's id (key_id of keys create)")
	case args[0] != "create" && args[0] != "revoke":
		return fmt.Errorf("keys: unknown command %q:\n%s", args[0], keysUsage)
	}
	pool, err := pgxpool.New(ctx, *databaseURL)
	if err != nil {
		// The parse error may contain the password; say only what to fix.
		return errors.New("keys: the database URL does not parse: use postgres://user@host:port/dbname?sslmode=disable")
	}
	defer pool.Close()
	if err := migrations.Payments.UpPool(ctx, pool); err != nil {
		return err
	}
	store := merchant.NewStore(pool)
	if args[0] == "revoke" {
		keyID, err := uuid.Parse(id)
		if err != nil {
			return fmt.Errorf("keys revoke: %q is not a key id (a UUID)", id)
		}
		if err := store.RevokeKey(ctx, keyID); err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "{\"key_id\":%q,\"revoked\":true}\n", keyID)
		return err
	}
	key, err := store.CreateKey(ctx, *name)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(key)
}
