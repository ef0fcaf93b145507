package pgprimary_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/internal/payment"
	"github.com/dscourse/payments-outbox/internal/pgprimary"
)

func testLogger(t *testing.T) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("test", t.Name())
}

func newWatcher(t *testing.T, logger *slog.Logger, reg prometheus.Registerer) *pgprimary.Watcher {
	t.Helper()
	w, err := pgprimary.NewWatcher(logger, reg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// openPool opens a pool on dbURL with w as its AfterConnect hook, as cmd/api and
// cmd/consumer do, closed when the test ends.
func openPool(t *testing.T, dbURL string, w *pgprimary.Watcher) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = w.AfterConnect
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// runUntilCleanup runs run until the test ends, then cancels it and waits for it.
func runUntilCleanup(t *testing.T, name string, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not return 30s after its context ended", name)
		}
	})
}

// primaryChanges reads postgres_primary_changes_total from reg.
func primaryChanges(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "postgres_primary_changes_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no postgres_primary_changes_total in the registry")
	return 0
}

// writer creates a payment every few milliseconds through the API's own transaction,
// and keeps going through the failover: a failed attempt is retried with a new
// payment.
type writer struct {
	mu    sync.Mutex
	acked map[uuid.UUID]bool // Create returned the payment: its COMMIT succeeded
	stop  func()
}

func startWriter(t *testing.T, store *payment.Store) *writer {
	t.Helper()
	w := &writer{acked: map[uuid.UUID]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			created, err := store.Create(ctx, merchant.DefaultID,
				payment.CreateRequest{UserID: "failover-" + uuid.NewString()[:8], Amount: 1000, Currency: "EUR"}, "")
			var perr *payment.Error
			if err != nil && !errors.As(err, &perr) && ctx.Err() == nil {
				t.Errorf("create payment: %v", err) // not a database error the API answers with
				return
			}
			if err == nil {
				w.mu.Lock()
				w.acked[created.Payment.ID] = true
				w.mu.Unlock()
			}
		}
	})
	var once sync.Once
	w.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(w.stop)
	return w
}

func (w *writer) acknowledged() map[uuid.UUID]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[uuid.UUID]bool, len(w.acked))
	for id := range w.acked {
		out[id] = true
	}
	return out
}
