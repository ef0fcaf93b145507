package cdc

import (
	"context"
	"log/slog"
	"time"
)

// monitor refreshes the outbox's pending count and oldest pending age (the same gauges
// as in polling mode: the relay marks rows published, so the table still says what is
// pending) and the WAL the slot retains.
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
		st, err := r.store.stats(queryCtx, r.cfg.Slot)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.logger.Warn("refresh outbox and slot stats", slog.Any("err", err))
			}
			continue
		}
		age := time.Duration(0)
		if !st.oldestPending.IsZero() {
			age = time.Since(st.oldestPending)
		}
		r.metrics.outbox.ObservePending(st.pending, age)
		r.metrics.walRetained.Set(float64(st.walRetained))
	}
}
