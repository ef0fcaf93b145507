package dlqreplay

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// The replayer is the operator: it watches the outbox for dead letters (rows in status
// failed, read as any operator's query would) and, outside the refusal windows,
// replays each one through the second replica's admin endpoint, oldest first, until
// the run ends. Each round of replays starts with the early copies of the events
// waiting behind them (earlycopy.go). With the CDC relay it notes, before each round, which walsender streams
// from the slot, so that the rows can tell that the replays went through the replica
// that does not stream.

// watchEvery is how often the replayer reads the dead letters: when it first saw one
// is the earliest the harness can say the event was dead-lettered.
const watchEvery = 200 * time.Millisecond

// A replayLog is what the replayer saw and did.
type replayLog struct {
	// deadLetters are the dead letters seen, by event id.
	deadLetters map[string]deadLetter
	// replays are the replays sent, in order.
	replays []replay
}

// A deadLetter is an event the harness saw dead-lettered.
type deadLetter struct {
	PaymentID string
	Sequence  int
	// SeenAt is when the harness first read its row failed.
	SeenAt time.Time
}

// A replay is one replay sent through the admin endpoint.
type replay struct {
	EventID string
	// Sent is when the request left, Answered when its answer came: the replay
	// committed in between.
	Sent, Answered time.Time
	// Holder is the pid of the walsender that streamed from the slot just before the
	// round's first replay was sent; 0 when none did (and always with the polling
	// relay).
	Holder int
	// DuringLoad is whether the load was still being sent.
	DuringLoad bool
	// Err is why the replay was refused; empty for a 200.
	Err string
}

// replayUntilDone watches and replays until ctx ends. A failed read or replay is
// logged and tried again at the next round: the rows say what was left undone.
func (d *dlqReplay) replayUntilDone(ctx context.Context, rn *harness.Run, conn *pgx.Conn, copies *copier) error {
	var lastRound time.Time
	for {
		if backoff.Until(ctx, time.Now().Add(watchEvery)) != nil {
			return nil
		}
		failed, err := failedEvents(ctx, conn)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			rn.Logger.Warn("read the dead letters", slog.Any("err", err))
			continue
		}
		d.noteDeadLetters(failed)
		if len(failed) == 0 || d.windowOpen() || time.Since(lastRound) < d.ReplayEvery {
			continue
		}
		lastRound = time.Now()
		copied, err := copies.copyWaiting(ctx, conn)
		if err != nil {
			rn.Logger.Warn("publish early copies", slog.Any("err", err))
		}
		d.mu.Lock()
		d.copies = append(d.copies, copied...)
		d.mu.Unlock()
		holder := 0
		if rn.RelayMode == verdict.RelayModeCDC {
			if holder, err = slotHolder(ctx, conn); err != nil {
				rn.Logger.Warn("read the slot's holder", slog.Any("err", err))
			}
		}
		for _, f := range failed {
			r := replay{EventID: f.eventID, Sent: time.Now(), Holder: holder, DuringLoad: rn.Loading()}
			if err := d.admin.Replay(ctx, rn.Replica.MetricsBase(), f.eventID); err != nil {
				r.Err = err.Error()
			}
			r.Answered = time.Now()
			d.mu.Lock()
			d.replays.replays = append(d.replays.replays, r)
			d.mu.Unlock()
		}
	}
}

// A failedEvent is an outbox row in status failed.
type failedEvent struct {
	eventID, paymentID string
	sequence           int
}

// failedEvents reads the dead-lettered rows in the order they were written, so that
// a payment's dead letters are replayed in their sequence.
func failedEvents(ctx context.Context, conn *pgx.Conn) ([]failedEvent, error) {
	rows, _ := conn.Query(ctx, `
		SELECT id::text, aggregate_id, coalesce((payload->>'sequence')::int, 1)
		FROM outbox_events WHERE status = 'failed' ORDER BY seq`)
	failed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (failedEvent, error) {
		var f failedEvent
		err := row.Scan(&f.eventID, &f.paymentID, &f.sequence)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("read failed outbox events: %w", err)
	}
	return failed, nil
}

// noteDeadLetters records when each dead letter was first seen.
func (d *dlqReplay) noteDeadLetters(failed []failedEvent) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.replays.deadLetters == nil {
		d.replays.deadLetters = map[string]deadLetter{}
	}
	for _, f := range failed {
		if _, seen := d.replays.deadLetters[f.eventID]; !seen {
			d.replays.deadLetters[f.eventID] = deadLetter{PaymentID: f.paymentID, Sequence: f.sequence, SeenAt: now}
		}
	}
}
