package pgfailover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
)

// Scenario is the pg-failover scenario. short runs each primary for less time, for a
// quicker run.
func Scenario(short bool) harness.Scenario {
	f := newFailover(short)
	return f.scenario("pg-failover", "the services run on a PostgreSQL pair of the run's own (a primary and its synchronous standby) through multi-host URLs with target_session_attrs=read-write; during a load paced over "+f.span.String()+
		" the harness SIGKILLs the primary's postmaster, promotes the standby "+f.PromoteAfter.String()+" later, rebuilds the old primary as the new one's synchronous standby "+f.OnPromoted.String()+
		" after that, and fails back to it "+f.WithStandby.String()+" later (the new primary stopped, the rebuilt node promoted); every 201 must be on the surviving timeline with its event and decision, and payments may be refused only while no primary answers")
}

func newFailover(short bool) *failover {
	f := &failover{PromoteAfter: 2 * time.Second, OnPromoted: 8 * time.Second, WithStandby: 8 * time.Second, OutageBudget: 10 * time.Second, span: 32 * time.Second}
	if short {
		f.OnPromoted, f.WithStandby, f.span = 4*time.Second, 4*time.Second, 20*time.Second
	}
	return f
}

func (f *failover) scenario(name, description string) harness.Scenario {
	return harness.Scenario{
		Name:        name,
		Description: description,
		Span:        f.span,
		LoadDelay:   -4 * time.Second, // the load starts first
		CopyEvery:   harness.DefaultCopyEvery,
		Postgres:    f.start,
		Disrupt:     f.disrupt,
		// The steps end with the fail-back; a drain that came first must not cut it.
		FinishDisruption: true,
		Validity:         f.rows,
	}
}

// A failover is the pg-failover scenario: the steps' timing, the pair it runs on, and
// what the harness saw of the servers.
type failover struct {
	// PromoteAfter is how long the standby is left alone after the kill: the time a
	// failover manager takes to be sure the primary is gone, and the outage's floor.
	PromoteAfter time.Duration
	// OnPromoted is how long the promoted standby runs alone before the old primary is
	// rebuilt as its standby; its commits then wait for no standby.
	OnPromoted time.Duration
	// WithStandby is how long the new primary runs with the rebuilt standby before the
	// fail-back.
	WithStandby time.Duration
	// OutageBudget bounds the time from the kill to the first payment accepted after
	// it: PromoteAfter, then a client's next attempt (the load's backoff caps at 4 s)
	// and a new connection that finds the new primary.
	OutageBudget time.Duration
	// Async turns synchronous replication off (pg-failover-async), and LagFor is how
	// long the standby receives nothing before the kill.
	Async  bool
	LagFor time.Duration

	span time.Duration // the load's pace

	pair *pair

	mu  sync.Mutex
	rec record
}

// record is what the disruption did and saw, in seconds from the run's start; 0 for
// a step not taken.
type record struct {
	addrs       []string // node 1's and node 2's addresses
	killedPID   int
	killS       float64
	promotedS   float64 // the promotion returned
	rebuildS    float64 // the rebuild started
	syncState   string  // pg_stat_replication.sync_state of the rebuilt standby, on the primary
	failbackS   float64 // the fail-back started
	failedBackS float64 // the fail-back returned
	// With Async: the primary's synchronous_standby_names at the kill, the standby's WAL
	// receiver that was stopped, and the bytes of the primary's WAL the standby lacked.
	syncNames    string
	receiverPID  int
	missingBytes int64
	ticks        []tick
}

// start is the Scenario's Postgres: the pair the run's databases are made on.
func (f *failover) start(ctx context.Context, root string, logger *slog.Logger) (string, func(passed bool), error) {
	p, err := startPair(ctx, root, logger)
	if err != nil {
		return "", nil, err
	}
	f.pair = p
	if f.Async {
		if err := f.asynchronous(ctx); err != nil {
			p.stop(false)
			return "", nil, err
		}
	}
	f.mu.Lock()
	f.rec.addrs = p.addrs()
	f.mu.Unlock()
	return p.adminURL(), p.stop, nil
}

// disrupt kills the primary, promotes the standby, rebuilds the old primary as its
// standby and fails back, with the watch probing both nodes throughout; it returns
// once the load has been sent, so that the watch covers every attempt.
func (f *failover) disrupt(ctx context.Context, rn *harness.Run) error {
	watch := startRoleWatch(ctx, f.pair, rn.Origin)
	defer func() {
		ticks := watch.Stop()
		f.mu.Lock()
		f.rec.ticks = ticks
		f.mu.Unlock()
	}()
	err := f.steps(ctx, rn, watch)
	for err == nil && rn.Loading() {
		err = backoff.Until(ctx, time.Now().Add(probeEvery))
	}
	if errors.Is(err, context.Canceled) {
		return nil // the run ended first: the validity rows say which step is missing
	}
	return err
}

// steps are the failover and the fail-back, each recorded as the harness saw it.
func (f *failover) steps(ctx context.Context, rn *harness.Run, watch *roleWatch) error {
	addrs := f.pair.addrs()
	since := func() float64 { return time.Since(rn.Origin).Seconds() }
	// The kill must find node 1 the primary, as the watch saw it.
	for t, ok := watch.last(); !ok || !t.Nodes[0].Primary; t, ok = watch.last() {
		if err := backoff.Until(ctx, time.Now().Add(probeEvery)); err != nil {
			return err
		}
	}
	var lsn string
	if f.Async {
		receiver, err := f.fallBehind(ctx)
		if err != nil {
			return err
		}
		rn.Disrupted("standby stopped receiving WAL", fmt.Sprintf("%s cut off from the primary (its WAL receiver, pid %d, ended); the primary commits without it", addrs[1], receiver))
		if err := backoff.Until(ctx, time.Now().Add(f.LagFor)); err != nil {
			return err
		}
		if lsn, err = f.primaryLSN(ctx); err != nil {
			return err
		}
	}
	pid, err := f.pair.killPostmaster(ctx, 1)
	if err != nil {
		return err
	}
	if f.Async {
		missing, err := f.missingBytes(ctx, lsn)
		if err != nil {
			return err
		}
		f.note(func(r *record) { r.missingBytes = missing })
	}
	f.note(func(r *record) { r.killedPID, r.killS = pid, since() })
	rn.Disrupted("SIGKILL PostgreSQL primary", fmt.Sprintf("postmaster pid %d of %s", pid, addrs[0]))

	if err := backoff.Until(ctx, time.Now().Add(f.PromoteAfter)); err != nil {
		return err
	}
	if _, err := f.pair.script(ctx, "promote"); err != nil {
		return err
	}
	f.note(func(r *record) { r.promotedS = since() })
	rn.Disrupted("standby promoted", addrs[1]+" is the primary; its commits wait for no standby")

	if err := backoff.Until(ctx, time.Now().Add(f.OnPromoted)); err != nil {
		return err
	}
	f.note(func(r *record) { r.rebuildS = since() })
	if _, err := f.pair.script(ctx, "rebuild"); err != nil {
		return err
	}
	state, err := syncState(ctx, f.pair.nodeURL(2))
	if err != nil {
		return err
	}
	f.note(func(r *record) { r.syncState = state })
	rn.Disrupted("old primary rebuilt as its standby", addrs[0]+" is the synchronous standby of "+addrs[1]+" (a fresh base backup)")

	if err := backoff.Until(ctx, time.Now().Add(f.WithStandby)); err != nil {
		return err
	}
	f.note(func(r *record) { r.failbackS = since() })
	if _, err := f.pair.script(ctx, "promote"); err != nil {
		return err
	}
	f.note(func(r *record) { r.failedBackS = since() })
	rn.Disrupted("failed back to the old primary", addrs[1]+" stopped (fast shutdown), "+addrs[0]+" promoted")
	return nil
}

// syncState reads, on the primary at url, the sync_state of its physical standby, the
// walsender named "standby" (the CDC relay's logical walsender has another name).
func syncState(ctx context.Context, url string) (string, error) {
	var state string
	err := queryOn(ctx, url, `
		SELECT coalesce((SELECT sync_state FROM pg_stat_replication
		                 WHERE application_name = 'standby'), 'no standby')`, &state)
	if err != nil {
		return "", fmt.Errorf("read the new primary's pg_stat_replication: %w", err)
	}
	return state, nil
}

func (f *failover) note(set func(*record)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	set(&f.rec)
}

func (f *failover) read() record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rec
}
