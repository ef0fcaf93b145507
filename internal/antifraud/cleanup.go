package antifraud

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CleanerConfig configures a Cleaner. The zero value of a field means its default.
type CleanerConfig struct {
	// Retention is how long a dedup row is kept after its event was first processed. It
	// must exceed the longest time after which an event can be delivered again (see
	// docs/adr/0004-consumer-dedup-store.md). Default 2160h (90 days).
	Retention time.Duration
	// Interval is how often the cleaner runs. Default 1h.
	Interval time.Duration
	// BatchSize is the most rows one DELETE removes, so that no statement holds locks or
	// writes WAL for long. Default 1000.
	BatchSize int
	// QueryTimeout bounds each DELETE. Default 10s.
	QueryTimeout time.Duration
}

func (c CleanerConfig) withDefaults() CleanerConfig {
	c.Retention = cmp.Or(c.Retention, 90*24*time.Hour)
	c.Interval = cmp.Or(c.Interval, time.Hour)
	c.BatchSize = cmp.Or(c.BatchSize, 1000)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, 10*time.Second)
	return c
}

// Validate reports a configuration the cleaner cannot run with.
func (c CleanerConfig) Validate() error {
	c = c.withDefaults()
	if c.Retention < 24*time.Hour {
		// A retention shorter than the redelivery horizon turns redeliveries into second
		// effects; a day is far below any horizon and is surely a typo.
		return fmt.Errorf("dedup retention %s: want at least 24h, normally 2160h (90 days)", c.Retention)
	}
	if c.Interval < 0 || c.BatchSize < 0 || c.QueryTimeout < 0 {
		return errors.New("cleaner interval, batch size and query timeout must be positive")
	}
	return nil
}

// A Cleaner deletes dedup rows older than the retention, in bounded batches.
type Cleaner struct {
	cfg    CleanerConfig
	pool   *pgxpool.Pool
	logger *slog.Logger
}

// NewCleaner returns a cleaner, or an error if cfg is not valid.
func NewCleaner(pool *pgxpool.Pool, cfg CleanerConfig, logger *slog.Logger) (*Cleaner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("dedup cleaner config: %w", err)
	}
	return &Cleaner{cfg: cfg.withDefaults(), pool: pool, logger: logger.With(slog.String("component", "dedup_cleaner"))}, nil
}

// Run cleans once at start, then every Interval, until ctx ends. Errors are logged and
// the next run tries again: a late cleanup costs only disk space.
func (c *Cleaner) Run(ctx context.Context) {
	ticker := time.NewTicker(c.cfg.Interval)
	defer ticker.Stop()
	for {
		deleted, err := c.runOnce(ctx)
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			c.logger.Warn("dedup cleanup failed", slog.Int64("deleted", deleted), slog.Any("err", err))
		case deleted > 0:
			c.logger.Info("dedup rows deleted", slog.Int64("deleted", deleted), slog.String("retention", c.cfg.Retention.String()))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// runOnce deletes expired rows, one batch per statement, until a batch comes back short.
func (c *Cleaner) runOnce(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := c.deleteBatch(ctx)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(c.cfg.BatchSize) {
			return total, nil
		}
	}
}

func (c *Cleaner) deleteBatch(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	tag, err := c.pool.Exec(ctx, `
		DELETE FROM processed_events
		WHERE event_id IN (
			SELECT event_id FROM processed_events
			WHERE processed_at < now() - make_interval(secs => $1)
			LIMIT $2)`,
		c.cfg.Retention.Seconds(), c.cfg.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("delete expired dedup rows: %w", err)
	}
	return tag.RowsAffected(), nil
}
