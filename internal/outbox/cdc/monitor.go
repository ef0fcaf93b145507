package cdc

import (
	"context"
	"log/slog"
	"time"

	"github.com/dscourse/payments-outbox/internal/outbox"
)

// monitor refreshes the outbox's pending count and oldest pending age (the same gauges,
// read by the same query as in polling mode, outbox.PendingStats: the relay marks rows
// published, so the table still says what is pending) and the WAL the slot retains.
func (r *Relay) monitor(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.StatsInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
		pending, age, err := outbox.PendingStats(queryCtx, r.store.pool)
		var retained int64
		if err == nil {
			retained, err = r.store.walRetained(queryCtx, r.cfg.Slot)
		}
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.logger.Warn("refresh outbox and slot stats", slog.Any("err", err))
			}
			continue
		}
		r.metrics.outbox.ObservePending(pending, age)
		r.metrics.walRetained.Set(float64(retained))
	}
}
