package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PendingMonitor refreshes outbox_pending_count, the oldest pending age and the WAL
// each replication slot of the database holds (slots.go), and logs an
// Error when the oldest pending event is older than AlertAge: during a broker outage
// that age, not the DLQ, is what tells operators something is wrong. Both relays run
// one. The age is the database's to compute (pendingStats): this host's clock and the
// API host's may disagree, and their skew would read as an outage or hide one.
type PendingMonitor struct {
	Pool    *pgxpool.Pool
	Metrics *Metrics
	Logger  *slog.Logger
	// Interval is how often the figures are refreshed.
	Interval time.Duration
	// QueryTimeout bounds each refresh, Also included.
	QueryTimeout time.Duration
	// AlertAge is the oldest pending age above which the monitor logs an Error, at
	// most once per minute.
	AlertAge time.Duration
	// Also, when set, runs after each refresh under the same timeout: the CDC relay
	// refreshes its slot's figures with it.
	Also func(ctx context.Context) error
}

// Run refreshes the figures every Interval until ctx ends.
func (m PendingMonitor) Run(ctx context.Context) {
	ticker := time.NewTicker(m.Interval)
	defer ticker.Stop()
	var lastAlert time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		queryCtx, cancel := context.WithTimeout(ctx, m.QueryTimeout)
		count, age, err := pendingStats(queryCtx, m.Pool)
		var slots map[string]int64
		if err == nil {
			slots, err = slotStats(queryCtx, m.Pool)
		}
		if err == nil && m.Also != nil {
			err = m.Also(queryCtx)
		}
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				m.Logger.Warn("refresh outbox stats", slog.Any("err", err))
			}
			continue
		}
		m.Metrics.observePending(count, age)
		m.Metrics.observeSlots(slots)
		if age > m.AlertAge && time.Since(lastAlert) > time.Minute {
			lastAlert = time.Now()
			m.Logger.Error("outbox events are not being published; is Kafka reachable?",
				slog.Duration("oldest_pending_age", age.Round(time.Second)), slog.Int64("pending", count))
		}
	}
}

// pendingStats counts the pending events and returns the age of the oldest one (zero
// when none). Both come from the partial index on pending rows (an index-only scan: the
// index carries enqueued_at), and the age from the database's clock alone: now() -
// enqueued_at, never created_at, which is the API host's clock
// (migrations/payments/00008_outbox_enqueued_at.sql).
func pendingStats(ctx context.Context, pool *pgxpool.Pool) (count int64, oldestAge time.Duration, err error) {
	var ageSeconds float64
	err = pool.QueryRow(ctx, `
		SELECT count(*), coalesce(extract(epoch FROM now() - min(enqueued_at)), 0)
		FROM outbox_events WHERE status = 'pending'`).Scan(&count, &ageSeconds)
	if err != nil {
		return 0, 0, fmt.Errorf("count pending outbox events: %w", err)
	}
	return count, time.Duration(ageSeconds * float64(time.Second)), nil
}
