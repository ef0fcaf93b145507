package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// The values of Options.RelayMode: the relay our API runs (RELAY_MODE, cmd/api).
const (
	RelayModePoll = "poll"
	RelayModeCDC  = "cdc"
)

// ValidRelayMode says whether mode is a RELAY_MODE the API accepts.
func ValidRelayMode(mode string) bool { return mode == RelayModePoll || mode == RelayModeCDC }

// dropReplicationSlots drops the replication slots of database, which the CDC relay
// created (one, named after the database). A slot is server-wide and outlives its
// relay: left behind, it would keep the shared server's WAL for ever. It waits for the
// slot's walsender to end, since a stopped API's server side ends a moment later.
func dropReplicationSlots(ctx context.Context, adminURL, database string, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		logger.Warn("drop the run's replication slots", slog.Any("err", err))
		return
	}
	defer conn.Close(ctx)
	for {
		var active int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1 AND active`, database).Scan(&active)
		if err == nil && active == 0 {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, database)
			if err == nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			logger.Warn("replication slots of the run left behind; drop them by hand",
				slog.String("database", database), slog.Any("err", fmt.Errorf("%d still active: %v", active, err)))
			return
		case <-time.After(200 * time.Millisecond): // a server process ending; no signal to wait on
		}
	}
}
