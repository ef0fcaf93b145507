package payment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// KeyCleanerConfig configures the KeyCleaner. Zero fields take the defaults below.
type KeyCleanerConfig struct {
	// Retention (IDEMPOTENCY_KEY_RETENTION) is how long an Idempotency-Key is kept after
	// its request: within it a retry replays the answer, after it the key is free again.
	// Clients retry for minutes, not days (the IETF draft suggests 24 hours). Default 24h.
	Retention time.Duration
	// Interval (IDEMPOTENCY_CLEANUP_INTERVAL) is how often the cleaner runs; a key lives
	// at most Retention plus Interval. Default 10m.
	Interval time.Duration
	// BatchSize bounds the rows of one DELETE, so that no statement holds many locks or
	// writes much WAL at once. Default 1000.
	BatchSize int
	// QueryTimeout bounds each DELETE. Default 5s.
	QueryTimeout time.Duration
}

func (c KeyCleanerConfig) withDefaults() KeyCleanerConfig {
	c.Retention = cmp.Or(c.Retention, 24*time.Hour)
	c.Interval = cmp.Or(c.Interval, 10*time.Minute)
	c.BatchSize = cmp.Or(c.BatchSize, 1000)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, 5*time.Second)
	return c
}

// Validate says which setting to fix. Zero fields are checked as their defaults.
func (c KeyCleanerConfig) Validate() error {
	var errs []error
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("IDEMPOTENCY_KEY_RETENTION=%s: use a positive duration, e.g. 24h", c.Retention))
	}
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("IDEMPOTENCY_CLEANUP_INTERVAL=%s: use a positive duration, e.g. 10m", c.Interval))
	}
	if c.BatchSize < 0 || c.QueryTimeout < 0 {
		errs = append(errs, errors.New("key cleaner: BatchSize and QueryTimeout cannot be negative"))
	}
	return errors.Join(errs...)
}

// KeyCleaner deletes the Idempotency-Keys of creations and transitions once they are
// older than the retention, so that the key tables do not grow without bound. It is
// shaped like the outbox's Cleaner: a ticker around runOnce, bounded batches, every
// statement under its own timeout. Payments and refunds stay: only the keys go.
type KeyCleaner struct {
	cfg    KeyCleanerConfig
	pool   *pgxpool.Pool
	logger *slog.Logger
}

// NewKeyCleaner returns a cleaner of the keys in pool; call Run.
func NewKeyCleaner(pool *pgxpool.Pool, cfg KeyCleanerConfig, logger *slog.Logger) (*KeyCleaner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("key cleaner config: %w", err)
	}
	return &KeyCleaner{cfg: cfg.withDefaults(), pool: pool, logger: logger.With(slog.String("component", "idempotency_key_cleaner"))}, nil
}

// Run cleans every Interval until ctx ends.
func (c *KeyCleaner) Run(ctx context.Context) {
	ticker := time.NewTicker(c.cfg.Interval)
	defer ticker.Stop()
	for {
		deleted, err := c.runOnce(ctx)
		switch {
		case errors.Is(err, context.Canceled):
		case err != nil:
			c.logger.Error("clean idempotency keys", slog.Any("err", err))
		case deleted > 0:
			c.logger.Info("cleaned idempotency keys", slog.Int64("deleted", deleted), slog.Duration("retention", c.cfg.Retention))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// runOnce deletes expired keys of each table batch by batch until a batch comes back
// short, and returns how many it deleted.
func (c *KeyCleaner) runOnce(ctx context.Context) (int64, error) {
	var total int64
	// Both tables have created_at, indexed (migration 00012).
	for _, table := range []string{"idempotency_keys", "transition_keys"} {
		for {
			queryCtx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
			tag, err := c.pool.Exec(queryCtx, `
				DELETE FROM `+table+` WHERE ctid IN (
					SELECT ctid FROM `+table+` WHERE created_at < now() - $1::interval LIMIT $2)`,
				c.cfg.Retention, c.cfg.BatchSize)
			cancel()
			if err != nil {
				return total, fmt.Errorf("delete expired %s: %w", table, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < int64(c.cfg.BatchSize) {
				break
			}
		}
	}
	return total, nil
}
