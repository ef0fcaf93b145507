package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The stream can carry a commit a moment before other sessions see it. An uncommitted
// row is invisible in the same way: the mark must keep trying until the commit shows,
// not leave the event pending for good. An event that is nowhere to be found is
// returned unmarked once ctx ends, so that the stream moves on.
func TestMarkPublishedWaitsForACommitNotYetVisible(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, id := b.insertUncommitted(t)
	// Later than the first move, which then finds nothing; the wait is the test's
	// stand-in for the server's moment, not a wait for the code under test.
	committed := make(chan error, 1)
	time.AfterFunc(300*time.Millisecond, func() { committed <- tx.Commit(ctx) })

	markCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	unmarked, err := store{pool: b.pool}.markPublished(markCtx, []uuid.UUID{id})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-committed; err != nil {
		t.Fatal(err)
	}
	if len(unmarked) != 0 {
		t.Errorf("unmarked = %v, want none", unmarked)
	}
	if got := b.count(t, `SELECT count(*) FROM outbox_published WHERE id = $1`, id); got != 1 {
		t.Errorf("event in outbox_published %d times, want 1: the mark gave up before the commit showed", got)
	}

	missing := uuid.New()
	shortCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	unmarked, err = store{pool: b.pool}.markPublished(shortCtx, []uuid.UUID{id, missing})
	if err != nil {
		t.Fatal(err)
	}
	if len(unmarked) != 1 || unmarked[0] != missing {
		t.Errorf("unmarked = %v, want only the missing event %s (the other is moved already)", unmarked, missing)
	}
}

// The lookup of a missed event in the history reads the whole history table, so
// neither the mark nor the dead-letter move may make it for the moment a commit takes
// to show: here the commit lands right after the first look at the row, which misses
// it, and the retries alone must move the event.
func TestHistoryLookedUpOnlyAfterTheMoment(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// act moves the event; moved counts where it must be afterwards.
		act   func(ctx context.Context, s store, id uuid.UUID) error
		moved string
		// look is part of each statement that looks for the row, history part of the
		// history lookup only.
		look, history string
	}{
		{
			name: "mark",
			act: func(ctx context.Context, s store, id uuid.UUID) error {
				unmarked, err := s.markPublished(ctx, []uuid.UUID{id})
				if err == nil && len(unmarked) > 0 {
					err = fmt.Errorf("unmarked = %v, want none", unmarked)
				}
				return err
			},
			moved:   `SELECT count(*) FROM outbox_published WHERE id = $1`,
			look:    "DELETE FROM outbox_events",
			history: "NOT EXISTS (SELECT 1 FROM outbox_published",
		},
		{
			name: "dead letter",
			act: func(ctx context.Context, s store, id uuid.UUID) error {
				dead, err := s.deadLetter(ctx, id, "poison")
				if err == nil && dead == nil {
					err = errors.New("no dead letter, want the event moved to the DLQ")
				}
				return err
			},
			moved:   `SELECT count(*) FROM outbox_dlq WHERE event_id = $1`,
			look:    "SELECT EXISTS (SELECT 1 FROM outbox_events",
			history: "FROM outbox_published",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			tx, id := b.insertUncommitted(t)
			committed := make(chan error, 1)
			pool, rec := b.recordedPool(t, func() { committed <- tx.Commit(ctx) })

			actCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := tt.act(actCtx, store{pool: pool}, id); err != nil {
				t.Fatal(err)
			}
			if err := <-committed; err != nil {
				t.Fatal(err)
			}
			if got := b.count(t, tt.moved, id); got != 1 {
				t.Fatalf("%s: %d rows, want 1", tt.moved, got)
			}
			if n := rec.count(tt.look); n < 2 {
				t.Fatalf("the row was looked for %d times, want at least 2: the test's commit came before the first look", n)
			}
			for _, sql := range rec.statements() {
				if strings.Contains(sql, tt.history) {
					t.Errorf("looked the event up in the history for a commit that showed at the next retry:\n%s", sql)
				}
			}
		})
	}
}

// recordedPool opens a pool on the test's database whose statements rec keeps, calling
// afterFirst once the first one has ended.
func (b *testBundle) recordedPool(t *testing.T, afterFirst func()) (*pgxpool.Pool, *statementRecorder) {
	t.Helper()
	rec := &statementRecorder{afterFirst: afterFirst}
	cfg, err := pgxpool.ParseConfig(b.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, rec
}

// statementRecorder is a pgx tracer that keeps every statement's text and calls
// afterFirst once the first statement other than a BEGIN has ended.
type statementRecorder struct {
	afterFirst func()
	once       sync.Once
	mu         sync.Mutex
	sqls       []string
}

func (r *statementRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sqls = append(r.sqls, data.SQL)
	return context.WithValue(ctx, isBegin{}, strings.EqualFold(strings.TrimSpace(data.SQL), "begin"))
}

// A transaction's BEGIN does not count as the first statement: the test's commit must
// come after the first look at the row.
func (r *statementRecorder) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if begin, _ := ctx.Value(isBegin{}).(bool); !begin {
		r.once.Do(r.afterFirst)
	}
}

// isBegin is the context key under which TraceQueryStart says the statement is a BEGIN.
type isBegin struct{}

func (r *statementRecorder) statements() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sqls)
}

// insertUncommitted inserts a pending event in a transaction it leaves open (rolled back
// at the test's end unless the test commits it): a row no other session sees yet.
func (b *testBundle) insertUncommitted(t *testing.T) (pgx.Tx, uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) }) //nolint:errcheck // after a commit, a no-op
	id := uuid.New()
	if _, err := tx.Exec(ctx, `INSERT INTO outbox_events (id, event_type, aggregate_id, payload) VALUES ($1, 'TestEvent', 'agg', '{}')`, id); err != nil {
		t.Fatal(err)
	}
	return tx, id
}

// count returns how many statements contain part.
func (r *statementRecorder) count(part string) int {
	n := 0
	for _, sql := range r.statements() {
		if strings.Contains(sql, part) {
			n++
		}
	}
	return n
}
