package replicapause

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/jackc/pgx/v5"
)

// replica-pause: two API processes share one outbox, and the harness SIGSTOPs one of
// them (rn.API) in the middle of publishing, for longer than the lease, while the other
// (rn.Replica) takes its rows over; then SIGCONTs it. The paused relay wakes up with
// acknowledgements for rows it no longer owns: its late outcomes must change nothing
// (ours: the database ended its idle batch transaction after the lease, so they fail
// with its connection, docs/adr/0002; a relay with lease columns needs a token to fence
// them), copies in the topic are allowed, and the order of each payment must hold.
//
// To see a late outcome change something from outside, the harness freezes the other
// replica too, just before the paused one resumes, and compares the outbox rows the paused
// one must not touch (published ones, and those the other replica holds)
// before and after the paused one has run alone for a while. Acks are slowed down
// (SlowAcks) for the whole disruption, so that a relay spends most of a batch between its
// send and its mark: a pause at a random instant with rows leased then mostly catches it
// there.

// replicaPause says when and how long to pause.
type replicaPause struct {
	// Pauses is how many times rn.API is paused.
	Pauses int
	// Pause is how long each lasts: longer than the lease (harness.RelayLease), so the
	// other replica takes the rows over.
	Pause time.Duration
	// Alone is how long the paused replica runs alone after it resumes, the other frozen:
	// long enough to record its late outcomes, shorter than a lease.
	Alone time.Duration
	// Gap is the random range of the wait before each pause.
	Gap [2]time.Duration
	// Claims, with the polling relay, is what the harness sees of the relays' claims
	// (replicapausehold.go).
	Claims *idleClaims
	// late are the rows the paused replica's late outcomes changed.
	late *lateRows
}

// lateRows are the outbox rows a paused replica's late outcomes changed. Safe for
// concurrent use.
type lateRows struct {
	mu  sync.Mutex
	ids []string
}

// add notes rows a paused replica changed after it resumed.
func (l *lateRows) add(ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids = append(l.ids, ids...)
}

// all returns the rows noted so far.
func (l *lateRows) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ids)
}

// env is our API's environment for the scenario: the reference relay's knob that holds
// one acknowledged batch in ten past the lease before its mark (the CDC relay has no
// lease and ignores it).
func (rp replicaPause) env() []string {
	return []string{"RELAY_FAULT_HOLD_BEFORE_MARK=" + holdBeforeMark.String()}
}

// pauseReplica runs the disruption until ctx ends.
func (rp replicaPause) disrupt(ctx context.Context, rn *harness.Run) error {
	if rn.Replica == nil {
		return fmt.Errorf("replica-pause needs two API processes (Scenario.Replicas)")
	}
	pause := rp.pauseOnce
	if rn.RelayMode == verdict.RelayModeCDC {
		pause = rp.pauseStreamingOnce // one slot instead of leases: replicapausecdc.go
	} else {
		watched := make(chan struct{})
		watchCtx, stopWatch := context.WithCancel(ctx)
		go func() {
			defer close(watched)
			rp.Claims.watch(watchCtx, rn.PaymentsDB)
		}()
		defer func() { stopWatch(); <-watched }()
	}
	if err := rn.Faults.Inject(faults.SlowAcks); err != nil {
		return err
	}
	defer rn.Faults.Clear(faults.SlowAcks) //nolint:errcheck // Reset clears every toxic after the run anyway
	for i := 0; i < rp.Pauses; i++ {
		if err := backoff.Until(ctx, time.Now().Add(harness.Between(rp.Gap))); err != nil {
			return nil
		}
		if err := pause(ctx, rn); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

// pauseOnce waits for leased rows, freezes rn.API past the lease, then lets it resume
// alone and records what its late outcomes changed.
func (rp replicaPause) pauseOnce(ctx context.Context, rn *harness.Run) error {
	// Some relay holds rows: with the acks slowed down, it is between send and mark.
	for deadline := time.Now().Add(10 * time.Second); rn.LeasedRows(ctx) <= 0 && time.Now().Before(deadline); {
		if err := backoff.Until(ctx, time.Now().Add(5*time.Millisecond)); err != nil {
			return nil
		}
	}
	leased := rn.LeasedRows(ctx)
	if err := rn.API.Freeze(); err != nil {
		return err
	}
	rn.Disrupted("replica paused (SIGSTOP)", fmt.Sprintf("%s, %d outbox rows leased", rn.API.Name, leased))
	if err := backoff.Until(ctx, time.Now().Add(rp.Pause)); err != nil {
		return rn.API.Thaw()
	}
	// The other replica has taken the rows over by now. Freeze it, keep what the paused
	// one must not touch, and let the paused one run alone.
	if err := rn.Replica.Freeze(); err != nil {
		return err
	}
	before, err := untouchableRows(ctx, rn.PaymentsDB)
	if err != nil {
		return err
	}
	if err := resumeAlone(rn, rn.API); err != nil {
		return err
	}
	waitErr := backoff.Until(ctx, time.Now().Add(rp.Alone))
	if err := rn.API.Freeze(); err != nil {
		return err
	}
	after, err := rowStates(context.WithoutCancel(ctx), rn.PaymentsDB, before)
	if err == nil {
		rp.late.add(changedRows(before, after))
	}
	if thawErr := rn.API.Thaw(); thawErr != nil {
		return thawErr
	}
	if thawErr := rn.Replica.Thaw(); thawErr != nil {
		return thawErr
	}
	rn.Disrupted("both replicas running", "")
	if waitErr != nil {
		return nil
	}
	return err
}

// An outboxRowState is what a late outcome would change in a row.
type outboxRowState struct {
	Status string
	// Owner is the lease token of a leased row, "held" for a row locked by a batch's
	// transaction, "" for a published one.
	Owner string
	// Detail is published_at for a published row, attempts for a held one.
	Detail string
}

// untouchableLeaseMargin is how long a lease must still run, at the first read, to count
// as the other replica's live lease: longer than the paused replica's time alone, so the
// lease outlives the comparison.
const untouchableLeaseMargin = 5 * time.Second

// untouchableRows reads the outbox rows that a relay without a live lease must leave
// alone: the published ones, and the pending ones the other replica holds (it is
// frozen while this is read). A relay that leases rows in columns holds those under a
// lease that outlives the comparison; ours holds the rows its batch's transaction
// locked (heldOutboxRows), and moves published events to outbox_published.
func untouchableRows(ctx context.Context, dbURL string) (map[string]outboxRowState, error) {
	return readRowStates(ctx, dbURL, func(leaseColumns bool) (string, []any) {
		if leaseColumns {
			return `
				SELECT id::text, status, coalesce(lease_token::text, ''), coalesce(published_at::text, '')
				FROM outbox_events
				WHERE status = 'published' OR lease_expires_at > now() + make_interval(secs => $1)`,
				[]any{untouchableLeaseMargin.Seconds()}
		}
		return `
			SELECT id::text, 'published', '', published_at::text FROM outbox_published
			UNION ALL
			SELECT id::text, status, 'held', attempts::text FROM outbox_events
			WHERE status = 'pending' AND id NOT IN (` + verify.FreePendingIDsSQL + `)`, nil
	})
}

// rowStates reads the rows of before again, by id: the second read of the comparison.
// Not the first read's query again, whose "live lease" depends on the time of the read:
// a lease that had 6 s left at the first read has 3 s left at the second, and its
// untouched row would look gone.
func rowStates(ctx context.Context, dbURL string, before map[string]outboxRowState) (map[string]outboxRowState, error) {
	ids := slices.Collect(maps.Keys(before))
	return readRowStates(ctx, dbURL, func(leaseColumns bool) (string, []any) {
		if leaseColumns {
			return `
				SELECT id::text, status, coalesce(lease_token::text, ''), coalesce(published_at::text, '')
				FROM outbox_events WHERE id = ANY($1::uuid[])`, []any{ids}
		}
		return `
			SELECT id::text, 'published', '', published_at::text FROM outbox_published WHERE id = ANY($1::uuid[])
			UNION ALL
			SELECT id::text, status,
			       CASE WHEN id IN (SELECT id FROM outbox_events WHERE id = ANY($1::uuid[]) FOR KEY SHARE SKIP LOCKED)
			            THEN '' ELSE 'held' END,
			       attempts::text
			FROM outbox_events WHERE id = ANY($1::uuid[])`, []any{ids}
	})
}

// readRowStates runs the query that queryFor returns for the outbox's layout (with or
// without lease columns), which selects id, status, owner and detail, on a connection
// of its own, in a transaction that ends at once (the lock probe's locks with it).
func readRowStates(ctx context.Context, dbURL string, queryFor func(leaseColumns bool) (string, []any)) (map[string]outboxRowState, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("read outbox rows: %w", err)
	}
	defer conn.Close(ctx)
	leaseColumns, err := verify.HasColumn(ctx, conn, "outbox_events", "lease_expires_at")
	if err != nil {
		return nil, fmt.Errorf("read outbox rows: %w", err)
	}
	query, args := queryFor(leaseColumns)
	out := map[string]outboxRowState{}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, query, args...)
		var id string
		var s outboxRowState
		_, err := pgx.ForEachRow(rows, []any{&id, &s.Status, &s.Owner, &s.Detail}, func() error {
			out[id] = s
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox rows: %w", err)
	}
	return out, nil
}

// changedRows lists the rows of before whose state differs in after (or that are gone).
// A row held by a batch's transaction before and no longer held after, unchanged or
// not, is left out: the database may have ended the frozen replica's transaction
// (its lease) during the comparison, and then the row was free to take.
func changedRows(before, after map[string]outboxRowState) []string {
	var changed []string
	for _, id := range slices.Sorted(maps.Keys(before)) {
		got, ok := after[id]
		if before[id].Owner == "held" && (!ok || got.Owner != "held") {
			continue
		}
		if !ok || got != before[id] {
			changed = append(changed, id)
		}
	}
	return changed
}

// lateOutcomes counts, in our API's log, the events of the relay's outcome lines (its
// Warn lines with an "events" count: a batch whose transaction the database ended, or
// failures such as the deadline its batch woke up past) written while it ran alone
// after a pause (the windows, wall-clock). Those are the late outcomes of batches it
// claimed before the pause, all about rows another worker owned by then; whether they
// changed anything is the SLO row's business. fenced is the part our relay itself
// reported as fenced (fencedLog). Both are -1 when the log cannot be read.
func lateOutcomes(logPath string, windows [][2]time.Time) (late, fenced int) {
	f, err := os.Open(logPath)
	if err != nil {
		return -1, -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var entry struct {
			Time      time.Time `json:"time"`
			Level     string    `json:"level"`
			Msg       string    `json:"msg"`
			Component string    `json:"component"`
			Events    int       `json:"events"`
		}
		if json.Unmarshal(sc.Bytes(), &entry) != nil || entry.Component != "outbox_relay" || entry.Level != "WARN" || entry.Events == 0 {
			continue
		}
		for _, w := range windows {
			if !entry.Time.Before(w[0]) && !entry.Time.After(w[1]) {
				late += entry.Events
				if strings.Contains(entry.Msg, fencedLog) {
					fenced += entry.Events
				}
				break
			}
		}
	}
	return late, fenced
}

// fencedLog begins the message of internal/outbox's Relay.record for a batch whose
// transaction the database ended after the lease: its late outcome was fenced.
const fencedLog = "lease expired before the batch was recorded"

// aloneWindows returns the wall-clock windows in which the paused replica ran alone.
func (rp replicaPause) aloneWindows(r *verdict.Report, rn *harness.Run) [][2]time.Time {
	var windows [][2]time.Time
	for _, d := range r.Disruptions {
		if d.What == resumedAlone {
			at := rn.Origin.Add(time.Duration(d.AtSeconds * float64(time.Second)))
			// The freeze that ends the window comes a little after Alone.
			windows = append(windows, [2]time.Time{at, at.Add(rp.Alone + time.Second)})
		}
	}
	return windows
}

// resumedAlone is the disruption that starts a paused replica's time alone.
const resumedAlone = "replica resumed (SIGCONT), the other frozen"

// resumeAlone records resumedAlone, then sends p the SIGCONT. The record comes first
// because the windows that start at it (aloneWindows, unfencedAfterResume) must hold
// every line p writes once it wakes, and p may write one at once: a relay whose timer
// fell due during the pause acts on it as soon as it runs, while the harness, on a busy
// machine, may get the CPU back only later: timed after the signal, the resume can
// come after p's first line (the CDC relay's "replication stream lost", say). Taken
// before the signal, the instant precedes anything p does awake.
func resumeAlone(rn *harness.Run, p *stack.Process) error {
	rn.Disrupted(resumedAlone, p.Name)
	return p.Thaw()
}

// validity is the scenario's own rows: the pauses happened with rows leased, the paused
// replica's late outcomes were fenced (its own log), and changed nothing (the harness's
// comparison, an SLO row).
func (rp replicaPause) validity(r *verdict.Report, rn *harness.Run) []verdict.Check {
	if rn.RelayMode == verdict.RelayModeCDC {
		return rp.validityCDC(r, rn)
	}
	pauses, withLeases := 0, 0
	for _, d := range r.Disruptions {
		if d.What == "replica paused (SIGSTOP)" {
			pauses++
			if !strings.Contains(d.Detail, ", 0 outbox rows leased") {
				withLeases++
			}
		}
	}
	late, fenced := lateOutcomes(rn.API.LogPath, rp.aloneWindows(r, rn))
	changes := rp.late.all()
	changed := fmt.Sprintf("%d rows changed", len(changes))
	if len(changes) > 0 {
		changed += ", first " + changes[0]
	}
	return append([]verdict.Check{
		verdict.NewCheck(verdict.Validity, "replica paused past the lease with outbox rows leased (SIGSTOP)", fmt.Sprintf("%d pauses", rp.Pauses),
			fmt.Sprintf("%d pauses, %d with rows leased", pauses, withLeases), pauses >= rp.Pauses && withLeases > 0),
		verdict.NewCheck(verdict.Validity, "late outcomes of the paused replica, for rows it no longer owned (its log, while alone)", "> 0",
			fmt.Sprintf("%d events (%d marks its relay reported fenced: %s)", late, fenced, fencedLog), late > 0),
		verdict.NewCheck(verdict.Validity, "the service's own copies in the topic (the other replica published the paused one's rows again)", "> 0", r.Evidence.ServiceCopies, r.Evidence.ServiceCopies > 0),
		harness.OrderInFlightCheck(r),
		verdict.NewCheck(verdict.SLO, "late outcomes of the paused replica changed nothing (published rows, the other replica's leases)", "0", changed, len(changes) == 0),
	}, rp.Claims.checks()...)
}
