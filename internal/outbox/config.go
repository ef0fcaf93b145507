package outbox

import (
	"cmp"
	"errors"
	"time"
)

// CleanerConfig configures a Cleaner.
type CleanerConfig struct {
	// Retention is how long published rows are kept. Default 720h (30 days).
	Retention time.Duration
	// Interval is how often the cleaner runs. Default 1m.
	Interval time.Duration
	// BatchSize is the most rows one DELETE removes, so no statement holds locks or
	// bloats WAL for long. Default 1000.
	BatchSize int
	// QueryTimeout bounds each DELETE. Default 10s.
	QueryTimeout time.Duration
}

func (c CleanerConfig) withDefaults() CleanerConfig {
	c.Retention = cmp.Or(c.Retention, 720*time.Hour)
	c.Interval = cmp.Or(c.Interval, time.Minute)
	c.BatchSize = cmp.Or(c.BatchSize, 1000)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, 10*time.Second)
	return c
}

// Validate reports a config the cleaner cannot run with.
func (c CleanerConfig) Validate() error {
	c = c.withDefaults()
	if c.Retention < 0 || c.Interval < 0 || c.BatchSize < 0 || c.QueryTimeout < 0 {
		return errors.New("cleaner settings must not be negative: check RELAY_RETENTION")
	}
	return nil
}
