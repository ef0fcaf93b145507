package outbox

import (
	"context"
	"log/slog"
	"time"
)

// notifyChannel is the channel the outbox_events_notify trigger signals on every
// committed insert (migrations/payments/00003_outbox_relay.sql).
const notifyChannel = "outbox_events"

// listen relays Postgres notifications to the workers, so a relay in one API replica
// wakes up for rows committed by another. Notify covers the replica's own payments;
// the workers' poll covers whatever both miss (a notification lost while the
// connection was down).
func (r *Relay) listen(ctx context.Context) {
	failures := 0
	for {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		pause := backoff(100*time.Millisecond, 10*time.Second, failures)
		failures++
		r.logger.Warn("LISTEN connection lost; relying on polling until it is back",
			slog.Any("err", err), slog.Duration("retry_in", pause))
		if !sleep(ctx, pause) {
			return
		}
	}
}

// listenOnce holds one connection in LISTEN until it fails or ctx ends.
func (r *Relay) listenOnce(ctx context.Context) error {
	conn, err := r.store.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A listening connection must not go back to the pool: take it out for good.
	pgConn := conn.Hijack()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.QueryTimeout)
		defer cancel()
		pgConn.Close(closeCtx)
	}()
	listenCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	_, err = pgConn.Exec(listenCtx, "LISTEN "+notifyChannel)
	cancel()
	if err != nil {
		return err
	}
	r.Notify() // rows may have committed while we were not listening
	for {
		if _, err := pgConn.WaitForNotification(ctx); err != nil {
			return err
		}
		r.Notify()
	}
}
