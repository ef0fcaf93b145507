package measure

// The relays that the relay benchmark compares, each on the table it publishes from. The
// drain (drain.go) and the latency measurement (latency.go) take any of them,
// so every relay is measured by the same code.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/outbox/poll"
)

// A Relay is one relay with the table it publishes from.
type Relay interface {
	// Fill empties the table and commits n pending events of n distinct payments.
	Fill(ctx context.Context, pool *pgxpool.Pool, n int) error
	// Pending reports whether any event is still unpublished.
	Pending(ctx context.Context, pool *pgxpool.Pool) (bool, error)
	// Insert writes one event in tx, as the API does. key is the Kafka record key and
	// is unique per event, so the latency measurement identifies records by it.
	Insert(ctx context.Context, tx pgx.Tx, key string, payload []byte) error
	// Start runs the relay on pool, publishing to topic, until stopped.
	Start(ctx context.Context, pool *pgxpool.Pool, topic string) (*Running, error)
}

// Running is a started relay.
type Running struct {
	// wake tells the relay that an event was just committed. The minimal relays ignore
	// it: they poll.
	wake func()
	// wakeups reads what woke the relay's workers so far; nil for the minimal relays,
	// which have one loop and no wake-up.
	wakeups func() (WakeFigures, error)
	cancel  context.CancelFunc
	done    chan struct{} // closed when the relay has returned; err is set by then
	err     error
}

// GoRun runs fn until stop, in a goroutine owned by the returned running.
func GoRun(ctx context.Context, wake func(), fn func(ctx context.Context) error) *Running {
	ctx, cancel := context.WithCancel(ctx)
	r := &Running{wake: wake, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = fn(ctx)
	}()
	return r
}

// Stop ends the relay and returns its error, if it failed.
func (r *Running) Stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// OutboxTable is our outbox_events table, as migrations/payments defines it.
type OutboxTable struct{}

func (OutboxTable) Fill(ctx context.Context, pool *pgxpool.Pool, n int) error {
	return benchenv.FillBacklog(ctx, pool, n)
}

func (OutboxTable) Pending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var pending bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_events WHERE status = 'pending')`).Scan(&pending)
	if err != nil {
		return false, fmt.Errorf("check outbox backlog: %w", err)
	}
	return pending, nil
}

// Insert writes an event as the API does: a UUIDv7 event id (uuid.NewV7, so ids grow
// with time and index inserts land at the right edge), through outbox.Insert.
func (OutboxTable) Insert(ctx context.Context, tx pgx.Tx, key string, payload []byte) error {
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("new event id: %w", err)
	}
	return outbox.Insert(ctx, tx, outbox.Message{
		ID: id, Type: event.TypePaymentCreated, AggregateID: key, OccurredAt: time.Now(), Payload: payload,
	})
}

// PollRelay is internal/outbox's relay, as cmd/api runs it.
type PollRelay struct {
	OutboxTable
	Config poll.Config
	Logger *slog.Logger
	// Unnudged: the generator's commits do not nudge the relay, as the commits of
	// another API replica do not: only its idle poll finds them.
	Unnudged bool
}

func (o PollRelay) Start(ctx context.Context, pool *pgxpool.Pool, topic string) (*Running, error) {
	cfg := o.Config
	cfg.Topic = topic
	reg := prometheus.NewRegistry()
	metrics, err := poll.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	relay, err := poll.NewRelay(pool, cfg, o.Logger, metrics)
	if err != nil {
		return nil, err
	}
	wake := relay.Notify
	if o.Unnudged {
		wake = func() {}
	}
	r := GoRun(ctx, wake, relay.Run)
	r.wakeups = func() (WakeFigures, error) { return gatherWakeups(reg) }
	return r, nil
}
