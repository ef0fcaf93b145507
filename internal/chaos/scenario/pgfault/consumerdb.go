package pgfault

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// A consumerDBFaults is the consumer-db scenario: the consumer, and nothing else of the
// run, reaches its database through the Toxiproxy proxy devstack.ConsumerPostgresProxy
// (Scenario.ConsumerThroughPostgresProxy), while the API's database stays up and the
// events keep coming. While the load arrives the harness breaks the consumer's database
// alone, in turn:
//
//   - a latency spike: every answer of the database delayed by SpikeLatency for SpikeFor;
//   - terminations: the harness watches pg_stat_activity of the consumer's database,
//     directly, for a session holding a write transaction (one with a transaction id: a
//     batch in the middle of its writes) and ends it with pg_terminate_backend, Kills
//     times; the consumer sees its batch fail with a server error about the connection;
//   - cuts: at such a moment, the proxy disabled for a second, which closes every
//     connection of the consumer, Cuts times;
//   - an outage: the proxy disabled for Outage.
//
// A batch whose transaction failed must be retried, never dead-lettered for it (the
// SLO row about the consumer's dead letters, which every scenario has) and never
// skipped by committing its offsets (the lost row). A small upstream latency
// (ProbeLatency) for the terminations and the cuts keeps each batch's transaction open
// long enough for the harness to see it.
type consumerDBFaults struct {
	SpikeLatency, SpikeFor time.Duration
	Kills, Cuts            int
	Outage                 time.Duration
	ProbeLatency           time.Duration

	mu sync.Mutex
	// spikeRTT is the slowest SELECT 1 the harness's own connection through the proxy
	// saw during the spike; 0 when it failed.
	spikeRTT time.Duration
	// killed describes each session terminated in a write transaction.
	killed []string
	// cutOpen is, for each cut, how many write transactions of the consumer were open
	// at it; cutSurvivors, how many of their sessions were still there a second later
	// (a consumer whose connections do not pass the proxy).
	cutOpen, cutSurvivors []int
	// outage is the window the proxy was down; EndS -1 while it is. decisions are the
	// committed decisions at its start and just before its end.
	outage                         faults.Window
	decisionsBefore, decisionsLate int
}

// disrupt runs the faults in turn, then leaves the proxy clean and waits for the run to
// end.
func (f *consumerDBFaults) disrupt(ctx context.Context, rn *harness.Run) error {
	// A scenario value serves every run of a process (cmd/mutants runs it once per
	// mutant): what an earlier run recorded is not this run's evidence.
	f.mu.Lock()
	f.spikeRTT, f.killed, f.cutOpen, f.cutSurvivors = 0, nil, nil, nil
	f.outage, f.decisionsBefore, f.decisionsLate = faults.Window{}, 0, -1
	f.mu.Unlock()
	proxy, restore, err := proxyToBreak(rn.Ports, faults.ConsumerPostgresProxy)
	if err != nil {
		return err
	}
	defer restore()
	watch, err := watchDatabase(ctx, rn.ConsumerDB, "consumer")
	if err != nil {
		return err
	}
	defer watch.Close(context.WithoutCancel(ctx))
	err = f.spike(ctx, rn, proxy)
	if err == nil {
		err = f.withProbeLatency(proxy, func() error {
			if err := f.terminate(ctx, rn, watch); err != nil {
				return err
			}
			return f.cut(ctx, rn, proxy, watch)
		})
	}
	if err == nil {
		err = f.outageWindow(ctx, rn, proxy, watch)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	<-ctx.Done()
	return nil
}

const consumerSpikeToxic = "chaos_consumer_pg_latency"

// spike delays the database's answers for SpikeFor and times a SELECT 1 of the
// harness's own through the proxy meanwhile.
func (f *consumerDBFaults) spike(ctx context.Context, rn *harness.Run, proxy *toxiproxy.Proxy) error {
	probe, err := pgx.Connect(ctx, faults.ThroughProxy(rn.ConsumerDB, rn.Ports.ConsumerProxiedPostgres()))
	if err != nil {
		return fmt.Errorf("connect through %s: %w", proxy.Name, err)
	}
	defer probe.Close(context.WithoutCancel(ctx))
	if _, err := proxy.AddToxic(consumerSpikeToxic, "latency", "downstream", 1, toxiproxy.Attributes{"latency": f.SpikeLatency.Milliseconds()}); err != nil {
		return fmt.Errorf("add latency to %s: %w", proxy.Name, err)
	}
	rn.Disrupted("consumer's PostgreSQL latency spike", fmt.Sprintf("+%s on every answer for %s", f.SpikeLatency, f.SpikeFor))
	end := time.Now().Add(f.SpikeFor)
	start := time.Now()
	if _, err := probe.Exec(ctx, "SELECT 1"); err == nil {
		f.mu.Lock()
		f.spikeRTT = time.Since(start)
		f.mu.Unlock()
	}
	waitErr := backoff.Until(ctx, end)
	if err := proxy.RemoveToxic(consumerSpikeToxic); err != nil {
		return fmt.Errorf("remove latency from %s: %w", proxy.Name, err)
	}
	return waitErr
}

// withProbeLatency runs step with ProbeLatency on every statement the consumer sends.
func (f *consumerDBFaults) withProbeLatency(proxy *toxiproxy.Proxy, step func() error) error {
	if _, err := proxy.AddToxic(consumerSpikeToxic, "latency", "upstream", 1, toxiproxy.Attributes{"latency": f.ProbeLatency.Milliseconds()}); err != nil {
		return fmt.Errorf("add latency to %s: %w", proxy.Name, err)
	}
	err := step()
	if rmErr := proxy.RemoveToxic(consumerSpikeToxic); rmErr != nil && err == nil {
		err = fmt.Errorf("remove latency from %s: %w", proxy.Name, rmErr)
	}
	return err
}

// openWriteTransactionsSQL lists the other sessions of the database that hold a
// transaction id: a batch that has written and not yet ended.
const openWriteTransactionsSQL = `
	SELECT pid, backend_xid::text AS xid, state
	FROM pg_stat_activity
	WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL`

// terminate ends Kills sessions of the consumer in the middle of a write transaction,
// a second apart. It polls every millisecond and gives up after 20 s per kill.
func (f *consumerDBFaults) terminate(ctx context.Context, rn *harness.Run, watch *pgx.Conn) error {
	for i := range f.Kills {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			var pid int
			var xid, state string
			var terminated bool
			err := watch.QueryRow(ctx, `
				SELECT pid, xid, state, pg_terminate_backend(pid) FROM (`+openWriteTransactionsSQL+`) AS open LIMIT 1`).
				Scan(&pid, &xid, &state, &terminated)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("terminate a consumer session: %w", err)
			}
			if terminated {
				what := fmt.Sprintf("pid %d xid %s %s", pid, xid, state)
				f.mu.Lock()
				f.killed = append(f.killed, what)
				f.mu.Unlock()
				rn.Disrupted("consumer's session terminated in a write transaction", fmt.Sprintf("%d of %d: %s", i+1, f.Kills, what))
				break
			}
			if err := backoff.Until(ctx, time.Now().Add(time.Millisecond)); err != nil {
				return err
			}
		}
		if err := backoff.Until(ctx, time.Now().Add(time.Second)); err != nil {
			return err
		}
	}
	return nil
}

// cut disables the proxy for a second at a moment the consumer holds a write
// transaction, Cuts times, and counts the sessions of those transactions that outlived
// the cut: a cut closes every connection through the proxy.
func (f *consumerDBFaults) cut(ctx context.Context, rn *harness.Run, proxy *toxiproxy.Proxy, watch *pgx.Conn) error {
	for i := range f.Cuts {
		pids, err := waitForWriteSessions(ctx, watch, 20*time.Second)
		if err != nil {
			return err
		}
		if err := proxy.Disable(); err != nil {
			return fmt.Errorf("disable %s: %w", proxy.Name, err)
		}
		rn.Disrupted("consumer's PostgreSQL connections cut", fmt.Sprintf("%d of %d: with %d write transactions of the consumer open", i+1, f.Cuts, len(pids)))
		waitErr := backoff.Until(ctx, time.Now().Add(time.Second))
		var survivors int
		if waitErr == nil {
			err = watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&survivors)
		}
		if err := proxy.Enable(); err != nil {
			return fmt.Errorf("enable %s: %w", proxy.Name, err)
		}
		if waitErr != nil {
			return waitErr
		}
		if err != nil {
			return fmt.Errorf("read pg_stat_activity: %w", err)
		}
		f.mu.Lock()
		f.cutOpen = append(f.cutOpen, len(pids))
		f.cutSurvivors = append(f.cutSurvivors, survivors)
		f.mu.Unlock()
		if err := backoff.Until(ctx, time.Now().Add(2*time.Second)); err != nil {
			return err
		}
	}
	return nil
}

// waitForWriteSessions polls until another session of the database holds a transaction
// id and returns the pids of those that do; none when none came within timeout.
func waitForWriteSessions(ctx context.Context, conn *pgx.Conn, timeout time.Duration) ([]int32, error) {
	deadline := time.Now().Add(timeout)
	for {
		rows, _ := conn.Query(ctx, `SELECT pid FROM (`+openWriteTransactionsSQL+`) AS open`)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return nil, fmt.Errorf("read pg_stat_activity: %w", err)
		}
		if len(pids) > 0 || time.Now().After(deadline) {
			return pids, nil
		}
		if err := backoff.Until(ctx, time.Now().Add(time.Millisecond)); err != nil {
			return nil, err
		}
	}
}

// outageWindow disables the proxy for Outage and counts the committed decisions half a
// second into it, once a COMMIT that reached the server before the proxy went down has
// been applied, and a second before its end.
func (f *consumerDBFaults) outageWindow(ctx context.Context, rn *harness.Run, proxy *toxiproxy.Proxy, watch *pgx.Conn) error {
	if err := proxy.Disable(); err != nil {
		return fmt.Errorf("disable %s: %w", proxy.Name, err)
	}
	f.mu.Lock()
	f.outage = faults.Window{Kind: faults.ProxyDown, StartS: time.Since(rn.Origin).Seconds(), EndS: -1}
	f.decisionsBefore, f.decisionsLate = -1, -1
	f.mu.Unlock()
	rn.Disrupted("consumer's PostgreSQL unreachable", fmt.Sprintf("proxy %s disabled for %s", proxy.Name, f.Outage))
	end := time.Now().Add(f.Outage)
	before, late, countErr := -1, -1, error(nil)
	waitErr := backoff.Until(ctx, time.Now().Add(500*time.Millisecond))
	if waitErr == nil {
		before, countErr = countDecisions(ctx, watch)
		waitErr = backoff.Until(ctx, end.Add(-time.Second))
	}
	if waitErr == nil && countErr == nil {
		late, countErr = countDecisions(ctx, watch)
		waitErr = backoff.Until(ctx, end)
	}
	if err := proxy.Enable(); err != nil {
		return fmt.Errorf("enable %s: %w", proxy.Name, err)
	}
	f.mu.Lock()
	f.outage.EndS = time.Since(rn.Origin).Seconds()
	f.decisionsBefore, f.decisionsLate = before, late
	f.mu.Unlock()
	rn.Disrupted("consumer's PostgreSQL reachable again", "")
	if countErr != nil {
		return countErr
	}
	return waitErr
}

// countDecisions counts the consumer's decisions (docs/contract.md: a MUST of a
// consumer database).
func countDecisions(ctx context.Context, conn *pgx.Conn) (int, error) {
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM decisions`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count decisions: %w", err)
	}
	return n, nil
}

// validity: each fault reached the consumer, by the harness's own evidence. A consumer
// whose sessions outlived every cut does not reach its database through the
// DATABASE_URL the harness gave it: the proxy's faults never touched it, and the rows
// about them are off and say so; the terminations, made on the server, still count.
func (f *consumerDBFaults) validity(r *verdict.Report, _ *harness.Run) []verdict.Check {
	f.mu.Lock()
	defer f.mu.Unlock()
	const latencyName = "consumer's database latency spike: the harness's SELECT 1 through the proxy"
	const cutsName = "consumer's connections cut with a write transaction of its open (pg_stat_activity), none outliving the cut"
	outageName := fmt.Sprintf("consumer's database unreachable for %s during the load: decisions committed in it (counted directly)", f.Outage)
	cutsInTx, survived := 0, 0
	for i, open := range f.cutOpen {
		if open > 0 && f.cutSurvivors[i] == 0 {
			cutsInTx++
		}
		survived += f.cutSurvivors[i]
	}
	killed := fmt.Sprint(len(f.killed))
	if len(f.killed) > 0 {
		killed += " (first: " + f.killed[0] + ")"
	}
	checks := []verdict.Check{
		verdict.NewCheck(verdict.Validity, "consumer's sessions terminated in a write transaction (pg_stat_activity, pg_terminate_backend)", fmt.Sprint(f.Kills), killed, len(f.killed) == f.Kills),
	}
	if len(f.cutOpen) > 0 && cutsInTx == 0 && survived > 0 {
		why := fmt.Sprintf("the consumer's sessions outlived every cut (%v of %v): it does not reach its database through the DATABASE_URL the harness gave it, so the proxy's faults never touched it", f.cutSurvivors, f.cutOpen)
		return append(checks, verdict.OffCheck(verdict.Validity, latencyName, "slowed", why), verdict.OffCheck(verdict.Validity, cutsName, fmt.Sprint(f.Cuts), why), verdict.OffCheck(verdict.Validity, outageName, "0", why))
	}
	overlap := f.outage.EndS > 0 && r.Evidence != nil && f.outage.StartS < r.Evidence.LoadEndS
	committed := f.decisionsLate - f.decisionsBefore
	outageGot := fmt.Sprintf("%d (window %.1f s to %.1f s; %d decisions half a second into it)", committed, f.outage.StartS, f.outage.EndS, f.decisionsBefore)
	return append(checks,
		verdict.NewCheck(verdict.Validity, latencyName, fmt.Sprintf(">= %s", f.SpikeLatency*3/4), f.spikeRTT.Round(time.Millisecond), f.spikeRTT >= f.SpikeLatency*3/4),
		verdict.NewCheck(verdict.Validity, cutsName, fmt.Sprint(f.Cuts), fmt.Sprintf("%d (open at each cut: %v; outlived it: %v)", cutsInTx, f.cutOpen, f.cutSurvivors), cutsInTx == f.Cuts),
		verdict.NewCheck(verdict.Validity, outageName, "0", outageGot, overlap && f.decisionsBefore >= 0 && f.decisionsLate >= 0 && committed == 0),
	)
}
