package cdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrSlotInUse means a CDC relay streams from the slot: DropSlot leaves it.
var ErrSlotInUse = errors.New("replication slot is in use by a CDC relay")

// DropSlot drops the CDC relay's replication slot slot from the database of pool, with
// its catch-up record, and reports whether there was one. Call it when the relay goes
// back to polling (cmd/api does on start with RELAY_MODE=poll, and `api cdc drop-slot`
// on demand): nobody reads the slot any more, and it keeps every WAL segment from its
// position on, for every database of the server, until the disk is full
// (max_slot_wal_keep_size, when set, invalidates it first). Nothing is lost by dropping
// it: the polling relay publishes every pending row, and a CDC relay started later
// creates a new slot and catches up from its snapshot. A slot a relay streams from is
// left, with ErrSlotInUse.
func DropSlot(ctx context.Context, pool *pgxpool.Pool, slot string) (bool, error) {
	var exists bool
	err := pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database())`,
		slot).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look up replication slot %s: %w", slot, err)
	}
	if !exists {
		return false, nil
	}
	// The server refuses to drop a slot a walsender streams from: no check of ours
	// first, which a relay could make stale before the drop.
	if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" { // object_in_use: a relay streams from it
			return false, fmt.Errorf("drop replication slot %s: %w", slot, ErrSlotInUse)
		}
		return false, fmt.Errorf("drop replication slot %s: %w", slot, err)
	}
	if err := (store{pool: pool}).forgetCatchUp(ctx, slot); err != nil {
		return true, err
	}
	return true, nil
}

// replaceLostSlot drops the relay's slot if PostgreSQL invalidated it because it held
// more WAL than max_slot_wal_keep_size (wal_status 'lost'): such a slot exists but can
// stream nothing, and the relay would retry it for ever. The session then creates a new
// slot, whose catch-up publishes every row still pending (catchUp): the rows the old
// slot never delivered, and those Kafka has already whose marks did not run, again
// (duplicates, never a gap).
func (r *Relay) replaceLostSlot(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	var lost bool
	err := r.store.pool.QueryRow(ctx, `
		SELECT coalesce((SELECT wal_status = 'lost' FROM pg_replication_slots
		                 WHERE slot_name = $1 AND database = current_database()), false)`, r.cfg.Slot).Scan(&lost)
	if err != nil {
		return fmt.Errorf("look up replication slot %s: %w", r.cfg.Slot, err)
	}
	if !lost {
		return nil
	}
	if _, err := DropSlot(ctx, r.store.pool, r.cfg.Slot); err != nil {
		return err
	}
	r.logger.Error("replication slot was invalidated (it held more WAL than max_slot_wal_keep_size); replaced it, and every pending row is published again")
	return nil
}
