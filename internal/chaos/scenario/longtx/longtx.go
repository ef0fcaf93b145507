package longtx

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/jackc/pgx/v5"
)

// A longTransaction is the long-transaction scenario: while payments arrive at a steady
// Rate, a session of the harness's own opens a REPEATABLE READ transaction on the
// payments database, reads the outbox once (which takes its snapshot) and stays idle in
// transaction for Hold, as a forgotten psql session or a long report would. As long as
// that snapshot lives, no row version it might see can be removed: every version the
// relay leaves behind (ours deletes each published event from outbox_events as it moves
// it to outbox_published; a relay that leases and marks in place updates it) stays as a
// dead tuple, in the table and in the partial index of pending rows, which the relay's
// claim must step over.
//
// The run measures the relay before, during and after the hold, from the harness's own
// clocks: each payment's 201 and the moment its event first reached the topic (the
// topic watch), so throughput is events reaching the topic per second and latency is
// 201 to topic. It also samples the outbox table's dead tuples and size. The relay
// must keep up: the events of each phase reach the topic as fast as they arrive, and
// the p99 latency during the hold stays within the fault-free bound
// harness.HealthyPublishS.
type longTransaction struct {
	Rate   float64 // payments per second
	Before time.Duration
	Hold   time.Duration
	After  time.Duration

	mu sync.Mutex
	// hold is when the snapshot was held; EndS -1 while it is.
	hold faults.Window
	// heldSamples and heldOK count the checks of the session during the hold, and
	// those that found it idle in transaction with its snapshot (backend_xmin).
	heldSamples, heldOK int
	samples             []verdict.TableSample
	// kept is n_dead_tup right after a VACUUM the harness ran at the end of the hold:
	// the dead tuples the snapshot kept from being removed; -1 until measured.
	kept int64
	// publishedInHold counts the outbox rows published during the hold.
	publishedInHold int64
}

// span is the load's: the three phases back to back.
func (l *longTransaction) span() time.Duration { return l.Before + l.Hold + l.After }

// payments is how many the load sends at Rate over span.
func (l *longTransaction) payments() int { return int(math.Round(l.Rate * l.span().Seconds())) }

// disrupt starts Before into the load: it holds the snapshot for Hold, then ends the
// transaction, and samples the outbox table every few seconds until the run ends.
func (l *longTransaction) disrupt(ctx context.Context, rn *harness.Run) error {
	stats, err := pgx.Connect(ctx, rn.PaymentsDB)
	if err != nil {
		return fmt.Errorf("connect to the payments database: %w", err)
	}
	defer stats.Close(context.WithoutCancel(ctx))
	holder, err := pgx.Connect(ctx, rn.PaymentsDB)
	if err != nil {
		return fmt.Errorf("connect to the payments database: %w", err)
	}
	defer holder.Close(context.WithoutCancel(ctx))

	l.sample(ctx, rn, stats, "before")
	holderPID := holder.PgConn().PID()
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return fmt.Errorf("begin the long transaction: %w", err)
	}
	// The first query takes the snapshot; from here on the session is idle in
	// transaction.
	var rows int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&rows); err != nil {
		return fmt.Errorf("take the snapshot: %w", err)
	}
	heldAt := time.Now()
	l.mu.Lock()
	l.hold = faults.Window{Kind: "snapshot_held", StartS: heldAt.Sub(rn.Origin).Seconds(), EndS: -1}
	l.mu.Unlock()
	rn.Disrupted("snapshot held", fmt.Sprintf("REPEATABLE READ, idle in transaction for %s (pid %d; it saw %d outbox rows)", l.Hold, holderPID, rows))

	end := time.Now().Add(l.Hold)
	for time.Now().Before(end) {
		next := time.Now().Add(5 * time.Second)
		if next.After(end) {
			next = end
		}
		if backoff.Until(ctx, next) != nil {
			break
		}
		l.checkHolder(ctx, stats, holderPID)
		l.sample(ctx, rn, stats, "during")
	}
	l.vacuum(ctx, stats, heldAt)
	if err := tx.Rollback(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("end the long transaction: %w", err)
	}
	l.mu.Lock()
	l.hold.EndS = time.Since(rn.Origin).Seconds()
	l.mu.Unlock()
	rn.Disrupted("snapshot released", "")

	for {
		l.sample(ctx, rn, stats, "after")
		if backoff.Until(ctx, time.Now().Add(5*time.Second)) != nil {
			return nil
		}
	}
}

// vacuum runs VACUUM on the outbox table while the snapshot is still held, and keeps
// how many dead tuples it could not remove (PostgreSQL reports them as n_dead_tup once
// it is done) beside how many rows were published during the hold, each of which left
// at least one dead version behind (the move's delete, or a lease's and a mark's updates).
func (l *longTransaction) vacuum(ctx context.Context, stats *pgx.Conn, heldAt time.Time) {
	l.mu.Lock()
	l.kept = -1
	l.mu.Unlock()
	// The rows counted are those published from the hold's start to the VACUUM's: one
	// published while the VACUUM runs may leave its dead version after the VACUUM has
	// counted (a CDC relay's markers move rows at any moment), which read as "the fault
	// did not bite" by a row or two. published_at is on the database's clock and heldAt
	// on the harness's: the hold's start is taken as the database's now() minus the
	// hold's age, both read just before the VACUUM.
	var vacuumAt time.Time
	if err := stats.QueryRow(ctx, `SELECT now()`).Scan(&vacuumAt); err != nil {
		return
	}
	heldFor := time.Since(heldAt)
	if _, err := stats.Exec(ctx, `VACUUM outbox_events`); err != nil {
		return
	}
	var kept, published int64
	err := stats.QueryRow(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox_events'`).Scan(&kept)
	if err != nil {
		return
	}
	table, err := verify.PublishedEventsTable(ctx, stats)
	if err != nil {
		return
	}
	err = stats.QueryRow(ctx, `SELECT count(*) FROM `+table+`
		WHERE published_at > $1::timestamptz - make_interval(secs => $2) AND published_at <= $1::timestamptz`,
		vacuumAt, heldFor.Seconds()).Scan(&published)
	if err != nil {
		return
	}
	l.mu.Lock()
	l.kept, l.publishedInHold = kept, published
	l.mu.Unlock()
}

// checkHolder counts one look at the holding session: it must be idle in
// transaction, with the snapshot that holds vacuum back (backend_xmin).
func (l *longTransaction) checkHolder(ctx context.Context, stats *pgx.Conn, pid uint32) {
	var ok bool
	err := stats.QueryRow(ctx, `
		SELECT state = 'idle in transaction' AND backend_xmin IS NOT NULL
		FROM pg_stat_activity WHERE pid = $1`, int64(pid)).Scan(&ok)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.heldSamples++
	if err == nil && ok {
		l.heldOK++
	}
}

// sample reads the outbox table's statistics; a failed read is skipped.
func (l *longTransaction) sample(ctx context.Context, rn *harness.Run, stats *pgx.Conn, phase string) {
	s := verdict.TableSample{AtS: time.Since(rn.Origin).Seconds(), Phase: phase}
	err := stats.QueryRow(ctx, `
		SELECT n_dead_tup, n_live_tup, pg_total_relation_size(relid)
		FROM pg_stat_user_tables WHERE relname = 'outbox_events'`).Scan(&s.DeadTuple, &s.LiveTuple, &s.TotalBytes)
	if err != nil {
		return
	}
	s.PendingScanBuffers = pendingScanBuffers(ctx, stats)
	l.mu.Lock()
	l.samples = append(l.samples, s)
	l.mu.Unlock()
}

// pendingScanBuffers explains, with ANALYZE, a look for the oldest pending rows and
// returns the shared buffers it touched; -1 when it cannot be read.
func pendingScanBuffers(ctx context.Context, stats *pgx.Conn) int64 {
	var plan []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	err := stats.QueryRow(ctx, `
		EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
		SELECT id FROM outbox_events WHERE status = 'pending' ORDER BY seq LIMIT 100`).Scan(&plan)
	if err != nil || len(plan) == 0 {
		return -1
	}
	return plan[0].Plan.Hit + plan[0].Plan.Read
}

// figures splits the run into the three phases by the hold's window.
func (l *longTransaction) figures(ev *verdict.Evidence) verdict.LongTransactionFigures {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := verdict.LongTransactionFigures{OutboxTable: slices.Clone(l.samples), DeadTuplesKept: l.kept, PublishedInHold: l.publishedInHold}
	if ev == nil || l.hold.EndS < 0 {
		return f
	}
	f.HoldSeconds = l.hold.EndS - l.hold.StartS
	bounds := []struct {
		phase      string
		start, end float64
	}{
		{"before", ev.LoadStartS, l.hold.StartS},
		{"during", l.hold.StartS, l.hold.EndS},
		{"after", l.hold.EndS, ev.LoadEndS},
	}
	for _, b := range bounds {
		f.Phases = append(f.Phases, phaseFigures(ev, b.phase, b.start, b.end))
	}
	return f
}

// phaseFigures measures the payments accepted in [start, end).
func phaseFigures(ev *verdict.Evidence, phase string, start, end float64) verdict.PhaseFigures {
	p := verdict.PhaseFigures{Phase: phase, StartS: start, EndS: end}
	var latencies []float64
	for id, accepted := range ev.AcceptedS {
		if accepted < start || accepted >= end {
			continue
		}
		p.Accepted++
		if seen, ok := ev.FirstSeenS[id]; ok {
			latencies = append(latencies, max(seen-accepted, 0)*1000)
		}
	}
	for _, seen := range ev.FirstSeenS {
		if seen >= start && seen < end {
			p.Published++
		}
	}
	if span := end - start; span > 0 {
		p.IncomingPerS = float64(p.Accepted) / span
		p.ThroughputPerS = float64(p.Published) / span
	}
	slices.Sort(latencies)
	p.LatencyP50MS, p.LatencyP99MS = quantile(latencies, 0.50), quantile(latencies, 0.99)
	return p
}

// quantile of sorted values, nearest rank; 0 when there are none.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// validity: the snapshot was held and held vacuum back (without it, the VACUUM removes
// nearly every dead tuple the relay's updates left, and the row fails); then the SLO rows that the
// relay kept up in each phase. The figures go into the report as well.
func (l *longTransaction) validity(r *verdict.Report, _ *harness.Run) []verdict.Check {
	figures := l.figures(r.Evidence)
	r.LongTransaction = &figures
	l.mu.Lock()
	samples, ok, window := l.heldSamples, l.heldOK, l.hold
	kept, published := l.kept, l.publishedInHold
	l.mu.Unlock()
	grew := deadTupleGrowth(figures.OutboxTable)
	checks := []verdict.Check{
		verdict.NewCheck(verdict.Validity, "snapshot held: the session idle in transaction with backend_xmin at every look", fmt.Sprintf("%d of %d, for %s", samples, samples, l.Hold),
			fmt.Sprintf("%d of %d, for %.0f s", ok, samples, window.EndS-window.StartS), samples > 0 && ok == samples && window.EndS-window.StartS >= l.Hold.Seconds()-1),
		verdict.NewCheck(verdict.Validity, "dead tuples a VACUUM at the end of the hold could not remove (n_dead_tup) >= rows published during it", fmt.Sprintf(">= %d", published),
			fmt.Sprintf("%d (n_dead_tup rose by %d during the hold)", kept, grew), kept >= 0 && published > 0 && kept >= published),
	}
	if len(figures.Phases) == 0 {
		return append(checks, verdict.NewCheck(verdict.SLO, "relay kept up in every phase", "measured", "no phases: the hold never ended", false))
	}
	for _, p := range figures.Phases {
		keptUp := p.Accepted > 0 && p.ThroughputPerS >= 0.9*p.IncomingPerS && p.LatencyP99MS <= harness.HealthyPublishS*1000
		checks = append(checks, verdict.NewCheck(verdict.SLO, "relay kept up "+p.Phase+" the hold: throughput >= 90% of incoming, p99 201-to-topic <= "+fmt.Sprint(harness.HealthyPublishS)+" s",
			"kept up", fmt.Sprintf("%.1f/s of %.1f/s incoming, p50 %.0f ms, p99 %.0f ms", p.ThroughputPerS, p.IncomingPerS, p.LatencyP50MS, p.LatencyP99MS), keptUp))
	}
	return checks
}

// deadTupleGrowth is how much n_dead_tup rose from the hold's start to its highest
// during the hold.
func deadTupleGrowth(samples []verdict.TableSample) int64 {
	var start, most int64 = -1, 0
	for _, s := range samples {
		switch s.Phase {
		case "before":
			start = s.DeadTuple
		case "during":
			most = max(most, s.DeadTuple)
		}
	}
	if start < 0 {
		return 0
	}
	return most - start
}
