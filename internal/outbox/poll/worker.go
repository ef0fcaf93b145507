package poll

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// When a worker claims: a worker goes idle when a claim finds nothing, and claims again
// when a commit of this process nudges it (Notify), at the relay's idle poll
// (pollIdle: commits of other processes), or at its own poll; between claims that find
// events it claims again at once (work). What one batch does is batch.go.

// A wakeSource says what made a worker claim: the value of the woken_by label of
// outbox_claims_total and outbox_commit_to_claim_seconds. Together they show which
// path really wakes the relay, and how long after the commit (docs/bench.md).
type wakeSource string

const (
	// wokenByNudge: Notify, called by this process after its own commit.
	wokenByNudge wakeSource = "nudge"
	// wokenByIdlePoll: the relay's IdlePollInterval ticker, which finds the commits
	// of other processes (API replicas) that no nudge announced.
	wokenByIdlePoll wakeSource = "idle_poll"
	// wokenByPoll: the worker's PollInterval ticker (or its start).
	wokenByPoll wakeSource = "poll"
	// wokenByBusy: the worker's previous claim found events, so it claimed again at
	// once.
	wokenByBusy wakeSource = "busy"
	// wokenByFullBatch: another worker claimed a full batch, so more was probably
	// waiting.
	wokenByFullBatch wakeSource = "full_batch"
)

var wakeSources = []wakeSource{wokenByNudge, wokenByIdlePoll, wokenByPoll, wokenByBusy, wokenByFullBatch}

// Notify tells the relay that new events were committed, so an idle worker publishes
// them now instead of at its next poll. It never blocks and is safe from any goroutine.
func (r *Relay) Notify() { r.nudge(wokenByNudge) }

// nudge wakes an idle worker, if none is woken already, and says why.
func (r *Relay) nudge(source wakeSource) {
	select {
	case r.wake <- source:
	default: // a nudge is already pending; one is as good as many
	}
}

// worker is what one worker goroutine owns: the two Kafka clients it sends with, and
// its own state between batches.
type worker struct {
	// own carries the worker's batches. Each worker has a client of its own: franz-go
	// merges the records of concurrent produce calls on one client into the same broker
	// requests, so on a client that every worker shared, one worker's records would
	// wait behind another's (a higher p99: see docs/bench.md, relay_latency_p99_ms), and
	// the broker, which judges a batch whole, could refuse a worker's record for
	// another worker's.
	own delivery.Producer
	// alone carries only records sent on their own after a rejection, one at a time
	// for the whole relay (isolate, in failure.go), so its verdict is about that record.
	alone delivery.Producer
	// timeouts backs off own's publish timeout after transport failures
	// (delivery.PublishTimeouts).
	timeouts delivery.PublishTimeouts
	// streak is the worker's part in the relay's count of busy workers (below).
	streak streak
}

// work is one worker: claim, publish, record, until ctx ends. Batches run under
// workCtx, which outlives ctx by the shutdown grace period.
func (r *Relay) work(ctx, workCtx context.Context, w *worker) {
	poll := time.NewTicker(r.cfg.PollInterval)
	defer poll.Stop()
	woken := wokenByPoll // the first claim looks for what is there, as a poll does
	for {
		if !backoff.Wait(ctx, r.outage.remaining()) {
			return
		}
		r.busy.claiming(&w.streak)
		claimed, err := r.runOnce(workCtx, w, woken)
		if err != nil && !errors.Is(err, context.Canceled) {
			r.logger.Error("relay batch", slog.Any("err", err))
		}
		if claimed > 0 && err == nil {
			woken = wokenByBusy
			continue // more may be ready: successors of what we just published
		}
		// The worker goes idle. A commit that an idle worker left to it during this
		// last claim may have come too late for the claim to see: claim again, or,
		// after a failure (the worker waits for its poll), hand it to another worker.
		if r.busy.stop(&w.streak) {
			if err == nil {
				woken = wokenByNudge
				continue
			}
			r.nudge(wokenByNudge)
		}
		var ok bool
		if woken, ok = r.waitForWork(ctx, poll.C, err != nil); !ok {
			return
		}
	}
}

// waitForWork waits, idle, until a worker should claim, and says why; false when ctx
// ended. A nudge is a commit, and an idle poll looks for one: while another worker is in a streak
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
			if (source == wokenByNudge || source == wokenByIdlePoll) && r.busy.leaveToStreak() {
				continue
			}
			return source, true
		}
	}
}

// pollIdle nudges an idle worker every IdlePollInterval, so that the relay finds the
// events that no nudge of this process announced: those another API replica committed
// (its relay publishes its own, unless it is busy, paused or gone), and those whose
// retry time came. A NOTIFY from a trigger on the outbox would tell every replica at
// once, but PostgreSQL serialises the commits of the transactions that notify (each
// holds a lock on the notification queue until its commit is flushed), which would
// cost the API about half its throughput (docs/bench.md, the API). A poll costs
// an idle relay one claim per interval, none while a worker is in a streak (its next
// claim sees the same rows: waitForWork leaves the poll to it).
func (r *Relay) pollIdle(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.IdlePollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			r.nudge(wokenByIdlePoll)
		}
	}
}

// joinAfter is how long a batch may go on before idle workers stop leaving new commits
// to its worker. A batch at the relay's usual rates takes a few milliseconds: a claim,
// a produce round trip, a mark. One that goes on much longer is waiting on something
// (a partition that does not answer, a broker that is gone), and the commits behind
// it must not wait with it.
//
// It is well above what a batch takes on a busy machine, though. There a batch often
// takes 20 to 50 ms, and a worker that joined then sends its produce request while the
// first one is still out: on a busy broker, requests that overlap are answered late,
// together (docs/bench.md, "The tail beside the API's load": a p99 of 37 to 82 ms
// against 5 to 9 ms for the requests that were alone), so joining made the tail it was
// meant to cut. The floor never overlaps its requests.
const joinAfter = 100 * time.Millisecond

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

// outageBackoff is the pause of the whole Relay after transport failures, shared by
// its workers: backoff on the number of consecutive batches that hit one.
type outageBackoff struct {
	base, max time.Duration

	mu       sync.Mutex
	failures int       // consecutive batches that hit a transport failure
	until    time.Time // no worker claims before this
}

// failed records a transport failure and returns the pause it imposed.
func (b *outageBackoff) failed() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := backoff.Delay(b.base, b.max, b.failures)
	b.failures++
	b.until = time.Now().Add(d)
	return d
}

// succeeded ends the pause: the broker answered.
func (b *outageBackoff) succeeded() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	b.until = time.Time{}
}

// remaining is how long workers must still wait before claiming.
func (b *outageBackoff) remaining() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Until(b.until)
}
