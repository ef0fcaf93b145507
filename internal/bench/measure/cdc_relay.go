package measure

// The CDC relay (internal/outbox/cdc) as a Relay, so that the drain and the
// latency measurement treat it exactly like the polling relay, and the measurement of
// the WAL its slot holds during an outage.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dscourse/payments-outbox/internal/outbox/cdc"
)

// CDCRelay is the CDC relay on our outbox_events table, with cmd/api's defaults.
type CDCRelay struct {
	OutboxTable
	Brokers []string
	Logger  *slog.Logger
}

// Fill makes sure the slot exists first, then commits the backlog with no relay
// running: the backlog is then what the slot streams, as after an outage of the relay,
// not what a new slot's catch-up reads from its snapshot.
func (c CDCRelay) Fill(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if err := c.EnsureSlot(ctx, pool); err != nil {
		return err
	}
	return c.OutboxTable.Fill(ctx, pool, n)
}

// EnsureSlot runs the relay until it streams from its slot (so the slot exists and its
// catch-up is over), then stops it. "Streams" is the slot's walsender past
// START_REPLICATION (pg_stat_replication.state catchup or streaming), which the relay
// sends only after its catch-up is recorded. The slot alone is not enough: it is active
// from the moment it is created, and a relay stopped then leaves its catch-up to be done
// again, so the next relay would publish the whole backlog from the table (the catch-up
// path) and then again from the stream.
func (c CDCRelay) EnsureSlot(ctx context.Context, pool *pgxpool.Pool) error {
	r, err := c.Start(ctx, pool, "bench.cdc-unused")
	if err != nil {
		return err
	}
	defer r.Stop()
	slot := cdc.DefaultSlot(pool.Config().ConnString())
	deadline := time.Now().Add(time.Minute)
	for {
		var streaming bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
			WHERE s.slot_name = $1 AND r.state IN ('catchup', 'streaming'))`, slot).Scan(&streaming)
		if err != nil {
			return fmt.Errorf("read slot %s: %w", slot, err)
		}
		if streaming {
			return caughtUpRecorded(ctx, pool, slot)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CDC relay not streaming from slot %s a minute after its start", slot)
		}
		select {
		case <-r.done:
			return fmt.Errorf("CDC relay stopped before streaming: %w", r.err)
		case <-time.After(20 * time.Millisecond): // polling a server view; no signal to wait on
		}
	}
}

// caughtUpRecorded fails unless the slot's catch-up is recorded (outbox_cdc_slots,
// migration 00007): without it the drain would measure the catch-up path, not the stream.
func caughtUpRecorded(ctx context.Context, pool *pgxpool.Pool, slot string) error {
	var done bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_cdc_slots WHERE slot_name = $1)`, slot).Scan(&done); err != nil {
		return fmt.Errorf("read catch-up of slot %s: %w", slot, err)
	}
	if !done {
		return fmt.Errorf("slot %s streams but its catch-up is not recorded: the next relay would publish the backlog from the table", slot)
	}
	return nil
}

func (c CDCRelay) Start(ctx context.Context, pool *pgxpool.Pool, topic string) (*Running, error) {
	reg := prometheus.NewRegistry()
	metrics, err := cdc.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	relay, err := cdc.NewRelay(pool, cdc.Config{DatabaseURL: pool.Config().ConnString(), Brokers: c.Brokers, Topic: topic}, c.Logger, metrics)
	if err != nil {
		return nil, err
	}
	// The stream brings every insert: nothing to wake.
	return GoRun(ctx, func() {}, relay.Run), nil
}

// DropSlot drops the benchmark database's slot once its walsender is gone. It must run
// before the database is dropped: PostgreSQL refuses to drop a database a slot uses.
func DropSlot(ctx context.Context, admin *pgxpool.Pool, dbURL string) error {
	slot := cdc.DefaultSlot(dbURL)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drop replication slot %s (drop it by hand): %w", slot, err)
		}
		time.Sleep(100 * time.Millisecond) // a server process ending; no signal to wait on
	}
}

// WALRetained returns how much WAL the slot of dbURL's database holds back.
func WALRetained(ctx context.Context, admin *pgxpool.Pool, dbURL string) (float64, error) {
	var bytes float64
	err := admin.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)
		FROM pg_replication_slots WHERE slot_name = $1`, cdc.DefaultSlot(dbURL)).Scan(&bytes)
	if err != nil {
		return 0, fmt.Errorf("read WAL retained by the slot: %w", err)
	}
	return bytes, nil
}
