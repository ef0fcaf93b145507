package replicapause

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/jackc/pgx/v5"
)

// holdBeforeMark is how long our relay holds one acknowledged batch in ten before its
// mark in replica-pause (fault-injection knob RELAY_FAULT_HOLD_BEFORE_MARK, reference
// service only): past the lease, so that a late mark happens on purpose, whenever the
// pauses catch the paused replica. The margin over the lease is more than
// claimIdleMargin, so a relay whose claim outlives the lease is seen doing so.
const holdBeforeMark = harness.RelayLease + 5*time.Second

// claimIdleMargin is how far past RELAY_LEASE a transaction may stay idle after its claim
// before the harness counts it as a claim that outlived its lease: the database ends a
// leased one at the lease, and the harness looks every claimPollInterval.
const claimIdleMargin = 2 * time.Second

const claimPollInterval = 200 * time.Millisecond

// idleClaimsSQL reads, for the database's other sessions idle in a transaction whose
// last statement claimed rows (SELECT ... FOR UPDATE SKIP LOCKED, as a relay that locks
// its batch does), how long each has been idle: a relay between its claim and its mark.
const idleClaimsSQL = `
	SELECT pid, xact_start, extract(epoch FROM clock_timestamp() - state_change)::float8
	FROM pg_stat_activity
	WHERE datname = current_database() AND pid <> pg_backend_pid()
	  AND state LIKE 'idle in transaction%' AND query ~* 'for\s+update\s+skip\s+locked'`

// idleClaims is what the harness saw of the relays' claims from outside, in
// pg_stat_activity, while replica-pause ran: the longest a claiming transaction stayed
// idle, and the transactions idle past the lease.
type idleClaims struct {
	mu sync.Mutex
	// longest is the longest idle time seen after a claim; -1 before any look.
	longest time.Duration
	// pastLease holds each transaction seen idle longer than the lease plus
	// claimIdleMargin, by its pid and start.
	pastLease map[string]time.Duration
	// err is the first error that stopped the watch.
	err error
}

// watch looks at the claims every claimPollInterval until ctx ends.
func (w *idleClaims) watch(ctx context.Context, dbURL string) {
	w.mu.Lock()
	w.longest, w.pastLease, w.err = -1, map[string]time.Duration{}, nil
	w.mu.Unlock()
	conn, err := pgx.Connect(ctx, dbURL) // directly: no proxy stands before it here
	if err != nil {
		w.stop(fmt.Errorf("connect to the payments database: %w", err))
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		if err := w.look(ctx, conn); err != nil {
			if ctx.Err() == nil {
				w.stop(err)
			}
			return
		}
		if backoff.Until(ctx, time.Now().Add(claimPollInterval)) != nil {
			return
		}
	}
}

func (w *idleClaims) look(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, idleClaimsSQL)
	if err != nil {
		return fmt.Errorf("read pg_stat_activity: %w", err)
	}
	var pid int
	var start time.Time
	var idle float64
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = pgx.ForEachRow(rows, []any{&pid, &start, &idle}, func() error {
		d := time.Duration(idle * float64(time.Second))
		w.longest = max(w.longest, d)
		if d > harness.RelayLease+claimIdleMargin {
			w.pastLease[fmt.Sprintf("pid %d since %s", pid, start.Format(time.TimeOnly))] = d
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read pg_stat_activity: %w", err)
	}
	return nil
}

func (w *idleClaims) stop(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
}

// checks are replica-pause's rows about the claims: one validity row, that a claim was
// seen idle close to the lease (a batch held or paused between its send and its mark,
// so that its mark came late), and one SLO row, that none stayed idle past it: a claim
// that outlives its lease keeps its rows, and every later event of their payments, from
// the other replica while its owner is quiet.
func (w *idleClaims) checks() []verdict.Check {
	w.mu.Lock()
	defer w.mu.Unlock()
	longest := "none seen"
	if w.longest >= 0 {
		longest = w.longest.Round(100 * time.Millisecond).String()
	}
	if w.err != nil {
		longest += " (watch stopped: " + w.err.Error() + ")"
	}
	past := fmt.Sprintf("%d (longest idle after a claim: %s)", len(w.pastLease), longest)
	for id, d := range w.pastLease {
		past += fmt.Sprintf("; e.g. %s, idle %s", id, d.Round(100*time.Millisecond))
		break
	}
	near := harness.RelayLease * 3 / 4
	return []verdict.Check{
		verdict.NewCheck(verdict.Validity, "a claiming transaction idle between its send and its mark for most of the lease (pg_stat_activity: idle in transaction after FOR UPDATE SKIP LOCKED)",
			fmt.Sprintf(">= %s", near), longest, w.err == nil && w.longest >= near),
		verdict.NewCheck(verdict.SLO, fmt.Sprintf("claiming transactions idle past RELAY_LEASE (%s, + %s) (pg_stat_activity)", harness.RelayLease, claimIdleMargin), "0",
			past, len(w.pastLease) == 0),
	}
}
