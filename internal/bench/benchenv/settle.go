package benchenv

// Each latency measurement starts from the same state of the database server, whichever
// relay it measures and whatever ran before it: no autovacuum worker running, and a
// checkpoint just done. A drain leaves work behind it (autovacuum of the rows it moved,
// a checkpoint for the WAL it wrote), and a measurement of 15 seconds that shares a
// small machine's CPUs with that work has a p99 of that work, not of the relay.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// settleTimeout bounds the wait for autovacuum: past it the measurement starts anyway
// (another database on a shared server may keep autovacuum busy for longer).
const settleTimeout = 2 * time.Minute

// Settle waits until no autovacuum worker runs on the server, up to settleTimeout, then
// runs a checkpoint.
func Settle(ctx context.Context, admin *pgxpool.Pool) error {
	deadline := time.Now().Add(settleTimeout)
	for {
		var workers int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'`).Scan(&workers)
		if err != nil {
			return fmt.Errorf("count autovacuum workers: %w", err)
		}
		if workers == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := admin.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
