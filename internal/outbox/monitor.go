package outbox

import (
	"context"
	"log/slog"
	"time"
)

// monitor refreshes outbox_pending_count and the oldest pending age, and logs an
// Error when the oldest pending event is older than OldestPendingAlert: during a
// broker outage that age, not the DLQ, is what tells operators something is wrong.
// The age is the database's to compute (store.pendingStats): this host's clock and the
// API host's may disagree, and their skew would read as an outage or hide one.
func (r *Relay) monitor(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.StatsInterval)
	defer ticker.Stop()
	var lastAlert time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
		count, age, err := r.store.pendingStats(queryCtx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.logger.Warn("refresh outbox stats", slog.Any("err", err))
			}
			continue
		}
		r.metrics.pending.Set(float64(count))
		r.metrics.oldestPendingAge.Set(age.Seconds())
		if age > r.cfg.OldestPendingAlert && time.Since(lastAlert) > time.Minute {
			lastAlert = time.Now()
			r.logger.Error("outbox events are not being published; is Kafka reachable?",
				slog.Duration("oldest_pending_age", age.Round(time.Second)), slog.Int64("pending", count))
		}
	}
}
