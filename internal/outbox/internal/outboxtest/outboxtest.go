// Package outboxtest holds the test helpers that the outbox's relays share (the polling
// relay, the CDC relay and their shared delivery code): a quiet logger, a logger whose
// lines a test reads back, the commit of outbox rows as the API makes them, and the
// reading of a count or a metric. Only tests import it.
package outboxtest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dscourse/payments-outbox/internal/outbox"
)

// Logger writes to the test log only with -v, to keep failures readable.
func Logger(t *testing.T) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

// LogBuffer collects a logger's output for tests that check what was logged. Safe for
// concurrent use.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything logged so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Logger returns a logger that writes JSON lines into l.
func (l *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, nil))
}

// Insert commits each message in a transaction of its own, as the API does.
func Insert(t *testing.T, pool *pgxpool.Pool, msgs ...outbox.Message) {
	t.Helper()
	for _, msg := range msgs {
		err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
			return outbox.Insert(context.Background(), tx, msg)
		})
		if err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
}

// Count runs query, which selects one number, and returns it.
func Count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Metric is the value of the counter or gauge name in reg, of the first series with the
// label pairs labels (name, value, ...), or 0 when there is none.
func Metric(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}) {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// Run runs run in a goroutine until the returned stop is called or the test ends, and
// checks that run returns, without error, within 30 s of its context's end. stop may be
// called more than once.
func Run(t *testing.T, run func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return 30s after its context ended")
		}
	})
	t.Cleanup(stop)
	return stop
}
