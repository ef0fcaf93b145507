package crash

import (
	"context"
	"errors"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
)

// Crash schedules. The points are random because, from outside a process, the moment
// that matters (between a database commit and the acknowledgement that follows it)
// cannot be aimed at: it can only be hit by chance. So the harness kills often and
// counts how many kills landed while work was in flight; for the consumer it raises
// the chance by freezing it at random instants and killing it when a freeze caught it
// in that moment.

// relayCrashes says how often crashRelay kills the API.
type relayCrashes struct {
	// Kills is how many times the API is SIGKILLed.
	Kills int
	// AcksLost is the random range of how long acknowledgements are withheld before a
	// kill: long enough for the relay to claim rows and send them, so the broker holds
	// records whose rows the dead relay never recorded as published.
	AcksLost [2]time.Duration
	// Clean is the random range of the pause after a restart, before the next fault.
	Clean [2]time.Duration
	// Watch bounds, before each kill, the probing for a payment committed without its
	// outbox row (see apiWatch.probe); the kill comes when one is caught, or at the end
	// of Watch if none is.
	Watch time.Duration
	// tally counts the kills, for the validity rows.
	tally *crashTally
}

// consumerCrashes says how crashConsumer picks its moments.
type consumerCrashes struct {
	// Arm is the random range of the wait, after a restarted consumer has made its
	// first decision, before the harness starts looking for a moment to kill.
	Arm [2]time.Duration
	// Watch bounds the probing for a moment between two of the consumer's commits (see
	// consumerWatch.probe); the kill comes when one is caught, or at the end of Watch
	// if none is.
	Watch time.Duration
	// tally counts the deaths, for the validity rows.
	tally *crashTally
}

// crashRelay kills the API cfg.Kills times, each at a random point of a lost-acks
// window: the relay has claimed rows, the broker has written them, and the
// acknowledgements never arrive. A relay that leases rows in columns leaves them
// leased by a dead process until the lease expires; ours holds them as row locks of a
// batch's transaction, which the database rolls back as the dead process's connections
// close. Then a new relay publishes them again, and the consumer must absorb the
// copies. It works for any API the harness started, ours or a student's.
func crashRelay(ctx context.Context, rn *harness.Run, cfg relayCrashes) error {
	watch, err := newAPIWatch(ctx, rn)
	if err != nil {
		return err
	}
	if watch != nil {
		defer watch.Close()
	}
	for range cfg.Kills {
		if err := rn.Faults.Inject(faults.DropAcks); err != nil {
			return err
		}
		if err := backoff.Until(ctx, time.Now().Add(harness.Between(cfg.AcksLost))); err != nil {
			return rn.Faults.Clear(faults.DropAcks)
		}
		caught := false
		// Probing costs the API half its time, and after the load it can catch
		// nothing: the kills then come at their random points at once.
		if watch != nil && rn.Loading() {
			if caught, err = watch.probeFor(ctx, cfg.Watch); err != nil {
				return errors.Join(err, rn.Faults.Clear(faults.DropAcks))
			}
		}
		inFlight := rn.LeasedRows(ctx)
		kill := rn.KillAPI
		if caught {
			// A frozen API cannot answer the scrape of its failure counter that KillAPI
			// makes first: its count, the service's own view only, dies with it.
			kill = rn.API.Kill
		}
		if err := kill(); err != nil {
			return err
		}
		cfg.tally.recordRelayKill(rn, inFlight, caught)
		if err := rn.Faults.Clear(faults.DropAcks); err != nil {
			return err
		}
		if err := rn.StartAPI(ctx); err != nil {
			return err
		}
		rn.Disrupted("api restarted", "")
		if err := backoff.Until(ctx, time.Now().Add(harness.Between(cfg.Clean))); err != nil {
			return nil
		}
	}
	return nil // after the last kill: the scenario waits for it (FinishDisruption)
}

// crashConsumer SIGKILLs the consumer at random points while it has work, restarts it
// each time, and restarts it too when it dies by itself (our consumer's self-crash
// knob). It kills only a consumer that made a decision since it started, so every
// incarnation gets somewhere and the run drains, and only while records wait for it,
// so it stops once the consumer has caught up. After each death it records what a
// restart will redeliver: see consumerWatch.deathEvidence.
func crashConsumer(ctx context.Context, rn *harness.Run, cfg consumerCrashes) error {
	watch, err := newConsumerWatch(ctx, rn)
	if err != nil {
		return err
	}
	defer watch.Close()
	for {
		died, err := watch.untilWorthKilling(ctx, cfg)
		if ctx.Err() != nil {
			// A consumer caught just as the run ended is frozen; let it stop normally.
			return rn.Consumer.Thaw()
		}
		if err != nil {
			return err
		}
		if !died.self {
			if err := rn.Consumer.Kill(); err != nil {
				return err
			}
		}
		// Read once the process is gone: no commit of its can follow.
		snap, err := watch.snapshot(ctx)
		if err != nil {
			return err
		}
		if err := rn.Consumer.Start(); err != nil {
			return err
		}
		redelivered, err := watch.redelivered(ctx, snap)
		if err != nil {
			return err
		}
		cfg.tally.recordConsumerDeath(rn, died, redelivered)
		if err := rn.Consumer.WaitHealthy(ctx); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// A death is how one consumer incarnation ended.
type death struct {
	// self: it exited by itself (the self-crash knob); otherwise the harness killed it.
	self bool
	// caught: the harness froze it between two of its commits (see
	// consumerWatch.probe) and killed it there.
	caught bool
}
