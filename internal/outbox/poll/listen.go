package poll

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
)

// notifyChannel is the channel the outbox_events_notify trigger signals on every
// committed insert (migrations/payments/00003_outbox_relay.sql).
const notifyChannel = "outbox_events"

// listen relays Postgres notifications to the workers, so a relay in one API replica
// wakes up for rows committed by another. Notify covers the replica's own payments;
// the workers' poll covers whatever both miss (a notification lost while the
// connection was down).
func (r *Relay) listen(ctx context.Context) {
	failures := 0 // consecutive attempts that never got to listen
	for {
		listened, err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			// The connection worked until now: this loss is a new incident (a
			// database restart), not one more failed retry of the last one.
			failures = 0
		}
		pause := backoff.Delay(100*time.Millisecond, 10*time.Second, failures)
		failures++
		r.logger.Warn("LISTEN connection lost; relying on polling until it is back",
			slog.Any("err", err), slog.Duration("retry_in", pause))
		if !backoff.Wait(ctx, pause) {
			return
		}
	}
}

// listenOnce holds one connection in LISTEN until it fails or ctx ends. It reports
// whether it got as far as listening.
//
// A dead TCP link (a host gone, a connection dropped by a firewall) gives no error,
// only silence, for as long as the kernel keeps the socket: minutes to hours. So the
// wait for a notification is bounded by QueryTimeout, and a connection silent that
// long is pinged under the same timeout, as any other query is: a dead link is
// noticed within two QueryTimeouts, for the price of one round trip per QueryTimeout
// on an idle connection.
func (r *Relay) listenOnce(ctx context.Context) (listened bool, err error) {
	acquireCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	conn, err := r.store.pool.Acquire(acquireCtx)
	cancel()
	if err != nil {
		return false, fmt.Errorf("acquire LISTEN connection: %w", err)
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
		return false, fmt.Errorf("listen on %s: %w", notifyChannel, err)
	}
	r.nudge(wokenByNotify) // rows may have committed while we were not listening
	for {
		waitCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
		_, err := pgConn.WaitForNotification(waitCtx)
		silent := waitCtx.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			r.nudge(wokenByNotify)
		case silent:
			// A timed-out read leaves a pgx connection usable: ask it to prove the
			// link is alive.
			pingCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
			err := pgConn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping LISTEN connection: %w", err)
			}
		default:
			return true, fmt.Errorf("wait for notification: %w", err)
		}
	}
}
