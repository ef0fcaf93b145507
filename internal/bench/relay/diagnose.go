package relay

// Where the relay's time goes: CPU and block profiles of our relay during a
// drain, the plan of its claim at a full backlog, and per-statement figures from
// pg_stat_statements. They come from one more drain after the measured repetitions, so
// that profiling never lowers a reported figure.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
)

// diagnoseConfig is what the diagnostic flags ask for.
type diagnoseConfig struct {
	cpuProfile, blockProfile string // files, or "" for none
	explain, statements      bool
	// latencyTrace, when set, is a file prefix: each latency measurement writes one
	// line per event to <prefix>-<relay>-<repetition>.csv (writeLatencyTrace), and its
	// produce requests and fetches beside it (tailtrace.go).
	latencyTrace string
	// goTrace, when set, is a file prefix for a Go execution trace of each latency
	// measurement (tailtrace.go).
	goTrace string
}

func (c diagnoseConfig) profiles() bool { return c.cpuProfile != "" || c.blockProfile != "" }

// diagnose runs what the diagnostic flags ask for, after the measured repetitions.
func (b relayBench) diagnose(ctx context.Context, stdout io.Writer) error {
	c := b.cfg.diagnose
	if c.explain {
		if err := b.explainClaim(ctx, stdout); err != nil {
			return err
		}
	}
	statements := c.statements
	if statements {
		loaded, err := statementsLoaded(ctx, b.Admin)
		if err != nil {
			return err
		}
		if !loaded {
			fmt.Fprintln(stdout, "pg_stat_statements is not loaded: add shared_preload_libraries = 'pg_stat_statements' "+
				"to postgresql.conf and restart PostgreSQL (scripts/stack/postgres.sh sets it from its next start)")
			statements = false
		}
	}
	if !statements && !c.profiles() {
		return nil
	}

	// The statistics are reset just before the relay starts, so that they hold the
	// drain's statements and not the backlog's insertion.
	resetBefore := func(dbURL string, start func() (func() error, error)) func() (func() error, error) {
		return func() (func() error, error) {
			if statements {
				if err := benchenv.ResetStatements(ctx, dbURL); err != nil {
					return nil, err
				}
			}
			return start()
		}
	}
	d, err := b.Drain(ctx, b.ours, b.ourURL, resetBefore(b.ourURL, c.startProfiles))
	if err != nil {
		return fmt.Errorf("diagnostic drain of our relay: %w", err)
	}
	fmt.Fprintf(stdout, "diagnostic drain, our relay: %.0f events/s (under the diagnostics; not reported)\n", d.EventsPerSecond)
	if !statements {
		return nil
	}
	if err := printStatements(ctx, stdout, b.ourURL, "our relay", b.cfg.Backlog); err != nil {
		return err
	}
	noProfiles := func() (func() error, error) { return func() error { return nil }, nil }
	if _, err := b.Drain(ctx, b.floor, b.floorURL, resetBefore(b.floorURL, noProfiles)); err != nil {
		return fmt.Errorf("diagnostic drain of the floor: %w", err)
	}
	return printStatements(ctx, stdout, b.floorURL, "the floor", b.cfg.Backlog)
}

// startProfiles starts the profiles that c asks for and returns what stops them and
// writes them. The block profile records every blocking event (rate 1) while it runs.
func (c diagnoseConfig) startProfiles() (func() error, error) {
	var cpu *os.File
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return nil, fmt.Errorf("create CPU profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("start CPU profile: %w", err)
		}
		cpu = f
	}
	if c.blockProfile != "" {
		runtime.SetBlockProfileRate(1)
	}
	return func() error {
		if cpu != nil {
			pprof.StopCPUProfile()
			if err := cpu.Close(); err != nil {
				return fmt.Errorf("write CPU profile: %w", err)
			}
		}
		if c.blockProfile == "" {
			return nil
		}
		runtime.SetBlockProfileRate(0)
		f, err := os.Create(c.blockProfile)
		if err != nil {
			return fmt.Errorf("create block profile: %w", err)
		}
		if err := pprof.Lookup("block").WriteTo(f, 0); err != nil {
			f.Close()
			return fmt.Errorf("write block profile: %w", err)
		}
		return f.Close()
	}, nil
}

// claimRecorder is a pgx tracer that keeps the first claim statement our relay sends,
// with its arguments, so that -explain shows the plan of exactly what the relay runs
// (internal/outbox keeps its SQL to itself).
type claimRecorder struct {
	mu   sync.Mutex
	sql  string
	args []any
}

func (c *claimRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	sql := strings.TrimSpace(data.SQL)
	if strings.HasPrefix(sql, "UPDATE outbox_events") && strings.Contains(sql, "FOR UPDATE SKIP LOCKED") {
		c.mu.Lock()
		if c.sql == "" {
			c.sql, c.args = sql, data.Args
		}
		c.mu.Unlock()
	}
	return ctx
}

func (*claimRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *claimRecorder) recorded() (string, []any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sql, c.args
}

// explainClaim fills our table with a backlog and prints EXPLAIN (ANALYZE, BUFFERS) of
// the claim the relay sent in the repetitions. ANALYZE executes the UPDATE, so it runs
// in a transaction that is rolled back.
func (b relayBench) explainClaim(ctx context.Context, stdout io.Writer) error {
	sql, args := b.claims.recorded()
	if sql == "" {
		return fmt.Errorf("explain claim: no claim statement seen during the drains")
	}
	pool, err := pgxpool.New(ctx, b.ourURL)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	if err := b.ours.Fill(ctx, pool, b.cfg.Backlog); err != nil {
		return err
	}
	var plan []string
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
		var err error
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		return errRollback
	})
	if err != nil && !errors.Is(err, errRollback) {
		return fmt.Errorf("explain claim: %w", err)
	}
	fmt.Fprintf(stdout, "EXPLAIN (ANALYZE, BUFFERS) of our relay's claim at a backlog of %d (rolled back):\n%s\n%s\n",
		b.cfg.Backlog, sql, strings.Join(plan, "\n"))
	return nil
}

// errRollback ends a transaction that must leave nothing behind.
var errRollback = errors.New("roll back")
