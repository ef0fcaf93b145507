package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/outbox/cdc"
)

// cdcUsage is how the cdc command is called.
const cdcUsage = `api cdc drop-slot [--database-url URL] [--slot NAME]   drop the CDC relay's replication slot (default: RELAY_CDC_SLOT, or the database's default)`

// runCDC is the cdc command. drop-slot drops the CDC relay's replication slot after a
// switch back to RELAY_MODE=poll, when the API could not drop it on start because a
// CDC relay still streamed from it (cdc.DropSlot). It prints one JSON line,
// {"slot", "dropped"}, and fails while a relay streams from the slot.
func runCDC(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "drop-slot" {
		return errors.New("cdc: say drop-slot:\n" + cdcUsage)
	}
	flags := flag.NewFlagSet("cdc drop-slot", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	databaseURL := flags.String("database-url", getenv("DATABASE_URL"), "the payments database (default $DATABASE_URL)")
	slot := flags.String("slot", getenv("RELAY_CDC_SLOT"), "the slot (default $RELAY_CDC_SLOT, or outbox_cdc_<database>)")
	if err := flags.Parse(args[1:]); err != nil {
		return fmt.Errorf("cdc drop-slot: %w\n%s", err, cdcUsage)
	}
	if *databaseURL == "" {
		return errors.New("cdc drop-slot: no database: pass --database-url postgres://... or set DATABASE_URL")
	}
	name := (config{DatabaseURL: *databaseURL, CDCSlot: *slot}).cdcSlot()
	pool, err := pgxpool.New(ctx, *databaseURL)
	if err != nil {
		// The parse error may contain the password; say only what to fix.
		return errors.New("cdc drop-slot: the database URL does not parse: use postgres://user@host:port/dbname?sslmode=disable")
	}
	defer pool.Close()
	dropped, err := cdc.DropSlot(ctx, pool, name)
	if errors.Is(err, cdc.ErrSlotInUse) {
		return fmt.Errorf("cdc drop-slot: a CDC relay streams from slot %s: stop it (or set RELAY_MODE=poll on every replica) first", name)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "{\"slot\":%q,\"dropped\":%t}\n", name, dropped)
	return err
}
