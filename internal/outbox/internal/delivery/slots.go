package delivery

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Both relays report the WAL that each replication slot of the outbox's database holds
// back, and not only the CDC relay its own: a slot left behind when the relay went back
// to polling, or after the slot or the database was renamed, is read by nobody and
// keeps every WAL segment from its position on, for every database of the server,
// until the disk is full. Reported in polling mode too, it shows; the alert
// OutboxReplicationSlotUnread (deploy/prometheus/alerts.yml) fires when a slot exists
// and no CDC relay reports its own.

// slotStats returns the WAL each replication slot of the pool's database retains. A slot
// invalidated by max_slot_wal_keep_size (restart_lsn NULL) retains none.
func slotStats(ctx context.Context, pool *pgxpool.Pool) (map[string]int64, error) {
	rows, _ := pool.Query(ctx, `
		SELECT slot_name::text, coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, 0)
		FROM pg_replication_slots WHERE database = current_database()`)
	out := map[string]int64{}
	var name string
	var retained int64
	_, err := pgx.ForEachRow(rows, []any{&name, &retained}, func() error {
		out[name] = retained
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read replication slots: %w", err)
	}
	return out, nil
}

// observeSlots sets outbox_replication_slot_wal_retained_bytes to slots, dropping the
// series of slots that no longer exist.
func (m *Metrics) observeSlots(slots map[string]int64) {
	m.slotWAL.Reset()
	for name, retained := range slots {
		m.slotWAL.WithLabelValues(name).Set(float64(retained))
	}
}
