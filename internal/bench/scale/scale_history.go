package scale

// The pieces of the scale benchmark that work on a table full of history: the relays
// measured without emptying it, a timer of the polling relay's claim statement, and one
// cycle of the relay's real cleaner.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/measure"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
)

// keepHistory is a relay whose table is left as it is before a latency measurement
// (measureLatency asks for an empty table), so that it runs beside the history.
// prepare, when set, readies the relay instead (the CDC relay's slot).
type keepHistory struct {
	measure.Relay
	prepare func(ctx context.Context, pool *pgxpool.Pool) error
}

func (k keepHistory) Fill(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if n != 0 {
		return fmt.Errorf("keepHistory cannot add a backlog of %d", n)
	}
	if k.prepare == nil {
		return nil
	}
	return k.prepare(ctx, pool)
}

// claimTimer is a pgx tracer that times every claim statement of the polling relay
// (poll.ClaimSQL), the claims that found
// nothing included: at a large history, those show what the table's size costs a relay
// with nothing to do.
type claimTimer struct {
	mu        sync.Mutex
	durations []float64 // milliseconds
}

type claimStartKey struct{}

func (c *claimTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if data.SQL == poll.ClaimSQL {
		return context.WithValue(ctx, claimStartKey{}, time.Now())
	}
	return ctx
}

func (c *claimTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	start, ok := ctx.Value(claimStartKey{}).(time.Time)
	if !ok || data.Err != nil {
		return
	}
	c.mu.Lock()
	c.durations = append(c.durations, float64(time.Since(start).Microseconds())/1000)
	c.mu.Unlock()
}

// percentiles returns the p50 and p99 of the claims timed so far, and how many.
func (c *claimTimer) percentiles() (p50, p99 float64, n int) {
	c.mu.Lock()
	sorted := slices.Sorted(slices.Values(c.durations))
	c.mu.Unlock()
	if len(sorted) == 0 {
		return 0, 0, 0
	}
	return measure.Percentile(sorted, 0.50), measure.Percentile(sorted, 0.99), len(sorted)
}

// cleanupCycle is one cycle of the cleaner.
type cleanupCycle struct {
	deleted float64
	took    time.Duration
}

// runCleanerOnce runs the relay's own cleaner (outbox.Cleaner, as cmd/api runs it, with
// its default batch size) for exactly one cycle with this retention. A Cleaner cleans
// once when it starts, then every Interval: the interval is set far beyond the cycle,
// and the cycle's end is the cleaner's own log line of what it deleted (or of its
// error). When that line's message changes in internal/outbox, this says so.
func runCleanerOnce(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (cleanupCycle, error) {
	reg := prometheus.NewRegistry()
	ended := make(chan slog.Record, 1)
	logger := slog.New(cycleEndHandler{ended: ended})
	cleaner, err := outbox.NewCleaner(pool, outbox.CleanerConfig{Retention: retention, Interval: 24 * time.Hour, QueryTimeout: time.Minute}, logger, reg)
	if err != nil {
		return cleanupCycle{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); cleaner.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	select {
	case rec := <-ended:
		took := time.Since(start)
		if rec.Level >= slog.LevelError {
			return cleanupCycle{}, fmt.Errorf("cleaner: %s", recordText(rec))
		}
		deleted, err := counterValue(reg, "outbox_cleaned_total")
		return cleanupCycle{deleted: deleted, took: took}, err
	case <-time.After(time.Hour):
		return cleanupCycle{}, fmt.Errorf(`cleaner logged neither "cleaned outbox" nor an error within an hour: ` +
			`did it delete nothing, or did its log message change?`)
	case <-ctx.Done():
		return cleanupCycle{}, ctx.Err()
	}
}

// cycleEndHandler passes on the cleaner's record of a finished cycle.
type cycleEndHandler struct{ ended chan<- slog.Record }

func (cycleEndHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h cycleEndHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "cleaned outbox" || r.Level >= slog.LevelError {
		select {
		case h.ended <- r.Clone():
		default:
		}
	}
	return nil
}
func (h cycleEndHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h cycleEndHandler) WithGroup(string) slog.Handler      { return h }

func recordText(r slog.Record) string {
	text := r.Message
	r.Attrs(func(a slog.Attr) bool { text += " " + a.String(); return true })
	return text
}

// counterValue reads one counter from reg.
func counterValue(reg *prometheus.Registry, name string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather metrics: %w", err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("no counter %s", name)
}
