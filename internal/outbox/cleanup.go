package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Cleaner deletes published outbox rows once they are older than the retention, so
// the table does not grow without bound. It is shaped like River's job cleaner: a
// ticker around runOnce, bounded batches, every statement under its own timeout.
type Cleaner struct {
	cfg    CleanerConfig
	store  store
	logger *slog.Logger
	// deleted is outbox_cleaned_total.
	deleted prometheus.Counter
}

// NewCleaner returns a cleaner of the outbox in pool, and registers its metric,
// outbox_cleaned_total, with reg; call Run.
func NewCleaner(pool *pgxpool.Pool, cfg CleanerConfig, logger *slog.Logger, reg prometheus.Registerer) (*Cleaner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cleaner config: %w", err)
	}
	deleted := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_cleaned_total",
		Help: "Published outbox events deleted after the retention period.",
	})
	if err := reg.Register(deleted); err != nil {
		return nil, fmt.Errorf("register cleaner metrics: %w", err)
	}
	return &Cleaner{
		cfg:     cfg.withDefaults(),
		store:   store{pool: pool},
		logger:  logger.With(slog.String("component", "outbox_cleaner")),
		deleted: deleted,
	}, nil
}

// Run cleans every Interval until ctx ends.
func (c *Cleaner) Run(ctx context.Context) {
	ticker := time.NewTicker(c.cfg.Interval)
	defer ticker.Stop()
	for {
		deleted, err := c.runOnce(ctx)
		switch {
		case errors.Is(err, context.Canceled):
		case err != nil:
			c.logger.Error("clean outbox", slog.Any("err", err))
		case deleted > 0:
			c.logger.Info("cleaned outbox", slog.Int64("deleted", deleted), slog.Duration("retention", c.cfg.Retention))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// runOnce deletes expired rows batch by batch until a batch comes back short, and
// returns how many it deleted. Small batches keep each statement's locks and WAL
// short, so cleanup never stalls the relay or the API.
func (c *Cleaner) runOnce(ctx context.Context) (int64, error) {
	var total int64
	for {
		queryCtx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
		n, err := c.store.deletePublished(queryCtx, c.cfg.Retention, c.cfg.BatchSize)
		cancel()
		total += n
		c.deleted.Add(float64(n))
		if err != nil {
			return total, err
		}
		if n < int64(c.cfg.BatchSize) {
			return total, nil
		}
	}
}
