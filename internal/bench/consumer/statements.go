package consumer

// Where the consumer's time goes: one more drain of one instance after the repetitions,
// so that the diagnostics never lower a reported figure, with the time of each statement
// as the consumer waits for it (round trip, encoding and waits for locks included) beside
// PostgreSQL's own execution time from pg_stat_statements, and optionally a CPU profile.

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
)

// diagnose runs the diagnostic drain and prints what it found.
func diagnose(ctx context.Context, env benchenv.Env, records []*kgo.Record, cfg consumerBenchConfig, stdout io.Writer) error {
	var loaded bool
	err := env.Admin.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'`).Scan(&loaded)
	if err != nil {
		return fmt.Errorf("read shared_preload_libraries: %w", err)
	}
	if !loaded {
		return fmt.Errorf("pg_stat_statements is not loaded: add shared_preload_libraries = 'pg_stat_statements' to postgresql.conf and restart PostgreSQL")
	}
	stopProfile := func() error { return nil }
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return fmt.Errorf("create CPU profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("start CPU profile: %w", err)
		}
		stopProfile = func() error { pprof.StopCPUProfile(); return f.Close() }
	}
	tracer := &statementTracer{byQuery: map[string]*statementTime{}}
	tracer.statsTo = func(dbURL string) error { return printServerStatements(ctx, stdout, dbURL, len(records)) }
	rate, err := drain(ctx, env, freshCopies(records), 1, tracer)
	if err := stopProfile(); err != nil {
		return fmt.Errorf("write CPU profile: %w", err)
	}
	if err != nil {
		return fmt.Errorf("diagnostic drain: %w", err)
	}
	fmt.Fprintf(stdout, "diagnostic drain, one instance: %.0f events/s (under the diagnostics; not reported)\n", rate)
	tracer.print(stdout, len(records))
	return nil
}

// statementTime is what one statement cost, summed over its calls.
type statementTime struct {
	calls int
	total time.Duration
}

// statementTracer is a pgx tracer that times every statement from the consumer's side.
type statementTracer struct {
	mu      sync.Mutex
	byQuery map[string]*statementTime
	// statsTo prints the server's statistics of dbURL's database, before drain drops it.
	statsTo func(dbURL string) error
}

type statementStartKey struct{}

type statementStart struct {
	query string
	at    time.Time
}

var whitespace = regexp.MustCompile(`\s+`)

func (t *statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, statementStartKey{}, statementStart{query: data.SQL, at: time.Now()})
}

func (t *statementTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	s, ok := ctx.Value(statementStartKey{}).(statementStart)
	if !ok {
		return
	}
	took := time.Since(s.at)
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.byQuery[s.query]
	if st == nil {
		st = &statementTime{}
		t.byQuery[s.query] = st
	}
	st.calls++
	st.total += took
}

// print prints the statements by the time the consumer waited for them.
func (t *statementTracer) print(w io.Writer, events int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	queries := slices.SortedFunc(func(yield func(string) bool) {
		for q := range t.byQuery {
			if !yield(q) {
				return
			}
		}
	}, func(a, b string) int { return int(t.byQuery[b].total - t.byQuery[a].total) })
	fmt.Fprintf(w, "statements as the consumer waited for them, drain of %d events:\n", events)
	fmt.Fprintf(w, "  %8s %10s %9s  %s\n", "calls", "total ms", "µs/event", "query")
	for _, q := range queries {
		st := t.byQuery[q]
		fmt.Fprintf(w, "  %8d %10.1f %9.2f  %s\n", st.calls, float64(st.total)/1e6, float64(st.total)/1e3/float64(events), shortQuery(q))
	}
}

func shortQuery(q string) string {
	q = strings.TrimSpace(whitespace.ReplaceAllString(q, " "))
	if len(q) > 100 {
		q = q[:100]
	}
	return q
}

// printServerStatements prints the ten statements of dbURL's database that took
// PostgreSQL the most time since benchenv.ResetStatements.
func printServerStatements(ctx context.Context, w io.Writer, dbURL string, events int) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	rows, _ := pool.Query(ctx, `
		SELECT calls, total_exec_time, rows, wal_bytes::float8, query
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC
		LIMIT 10`)
	fmt.Fprintf(w, "pg_stat_statements, drain of %d events (execution in PostgreSQL):\n", events)
	fmt.Fprintf(w, "  %8s %10s %9s %9s %10s  %s\n", "calls", "total ms", "µs/event", "rows", "WAL B/evt", "query")
	var calls, nrows int64
	var millis, wal float64
	var query string
	_, err = pgx.ForEachRow(rows, []any{&calls, &millis, &nrows, &wal, &query}, func() error {
		fmt.Fprintf(w, "  %8d %10.1f %9.2f %9d %10.1f  %s\n", calls, millis, millis*1000/float64(events), nrows, wal/float64(events), shortQuery(query))
		return nil
	})
	if err != nil {
		return fmt.Errorf("read pg_stat_statements: %w", err)
	}
	return nil
}
