package poll

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
)

// A wakeSource says what made a worker claim: the value of the woken_by label of
// outbox_claims_total and outbox_commit_to_claim_seconds. Together they show which
// path really wakes the relay, and how long after the commit (docs/bench.md).
type wakeSource string

const (
	// wokenByNudge: Notify, called by this process after its own commit.
	wokenByNudge wakeSource = "nudge"
	// wokenByNotify: a Postgres NOTIFY, from a commit of any process (or the
	// listener's start).
	wokenByNotify wakeSource = "notify"
	// wokenByPoll: the worker's PollInterval ticker (or its start).
	wokenByPoll wakeSource = "poll"
	// wokenByBusy: the worker's previous claim found events, so it claimed again at
	// once.
	wokenByBusy wakeSource = "busy"
	// wokenByFullBatch: another worker claimed a full batch, so more was probably
	// waiting.
	wokenByFullBatch wakeSource = "full_batch"
)

var wakeSources = []wakeSource{wokenByNudge, wokenByNotify, wokenByPoll, wokenByBusy, wokenByFullBatch}

// waitForWork waits, idle, until a worker should claim, and says why; false when ctx
// ended. A nudge or a notification is a commit: while another worker is in a streak
// (it claims again at once after every claim that found events, work), that worker
// sees the commit in its next claim, so the idle worker leaves it to it and waits on.
// So at a rate that one worker keeps up with, one worker claims, each batch holds
// what committed during the last one, and the relay does not spend a transaction and
// a produce request on every commit, as it would if every commit woke a worker of its
// own (each batch would hold about one event). At 1,000 events/s a worker in a streak
// takes almost every event (see docs/bench.md, relay_latency_woken_by_*_share). A poll is
// left to a worker in a streak too: that worker's next claim finds whatever the poll
// would find (the poll is there for commits whose wake-up was lost, and for events
// whose retry time came), and each idle worker's poll that claimed beside it cost a
// transaction and a produce request for a few events. A full batch, or a batch that
// has gone on longer than joinAfter (a slow broker, a partition that does not
// answer), wakes the idle worker whatever the others do. After a failed batch
// (failed), the worker waits for its next poll only: it did not claim again, so it
// must not leave a commit to itself.
func (r *Relay) waitForWork(ctx context.Context, poll <-chan time.Time, failed bool) (wakeSource, bool) {
	wake := r.wake
	if failed {
		wake = nil
	}
	for {
		select {
		case <-ctx.Done():
			return "", false
		case <-poll:
			if r.busy.leaveToStreak() {
				continue
			}
			return wokenByPoll, true
		case source := <-wake:
			if (source == wokenByNudge || source == wokenByNotify) && r.busy.leaveToStreak() {
				continue
			}
			return source, true
		}
	}
}

// joinAfter is how long a batch may go on before idle workers stop leaving new commits
// to its worker. A batch at the relay's usual rates takes a few milliseconds: a claim,
// a produce round trip, a mark. One that takes longer is waiting on something, and
// the commits behind it must not wait with it.
const joinAfter = 20 * time.Millisecond

// busyWorkers counts the workers in a streak: from a claim that found events until
// one of their claims finds none (or their batch fails). A streak covers the worker's
// next claim too, not only its batches: were the count to drop between two batches of
// one worker, every commit landing in that gap would wake an idle worker, and at 1,000
// events/s two or three workers would claim side by side, each sending its own produce
// requests on its own connection, which raises the relay's p99 (see docs/bench.md,
// relay_latency_p99_ms).
type busyWorkers struct {
	mu     sync.Mutex
	n      int       // workers in a streak
	latest time.Time // when the latest claim of a streak returned events
	full   bool      // whether it filled its batch: then more is waiting than one worker takes
	left   time.Time // when an idle worker last left a commit to a worker in a streak
	// now is the clock, time.Now when nil: a test sets its own.
	now func() time.Time
}

func (b *busyWorkers) clock() time.Time {
	if b.now != nil {
		return b.now()
	}
	return time.Now()
}

// streak is one worker's part in busyWorkers.
type streak struct {
	in         bool
	claimStart time.Time // when the worker's latest claim began
}

// claiming notes that the worker begins a claim.
func (b *busyWorkers) claiming(s *streak) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s.claimStart = b.clock()
}

// found notes that the worker's claim found events; full, that it filled its batch.
func (b *busyWorkers) found(s *streak, full bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !s.in {
		s.in = true
		b.n++
	}
	b.latest = b.clock()
	b.full = full
}

// stop ends the worker's streak, if it is in one, and reports whether an idle worker
// left a commit to it since its latest claim began: that claim's snapshot may have
// been taken before the commit, so the commit may still wait. The check and the end
// of the streak are one step under the lock, so a commit left is seen either here or
// by no worker in a streak (then the idle worker takes it).
func (b *busyWorkers) stop(s *streak) (left bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !s.in {
		return false
	}
	s.in = false
	b.n--
	return b.left.After(s.claimStart)
}

// leaveToStreak is asked by an idle worker about a commit (or a poll): it leaves the
// commit to a worker in a streak, and reports true, when that worker's latest claim
// returned less than joinAfter ago and did not fill its batch: that worker claims again
// at once, and one worker is enough for what is waiting. It notes when a commit was
// left, so that the worker's stop can tell whether its latest claim may have missed
// one. After a full batch, a backlog is waiting, and every worker is wanted (the full
// batch's own nudge may have been lost in the wake slot to a commit's).
func (b *busyWorkers) leaveToStreak() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := b.clock(); b.n > 0 && !b.full && now.Sub(b.latest) < joinAfter {
		b.left = now
		return true
	}
	return false
}

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
