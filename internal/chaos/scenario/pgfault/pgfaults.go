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

// A pgFaults is the pg-faults scenario: the API and its relay reach PostgreSQL through
// the Toxiproxy proxy devstack.PostgresProxy (Scenario.APIThroughPostgresProxy), and
// while the load arrives the harness breaks that link in three ways, in turn:
//
//   - latency spikes: every byte from the database is delayed by SpikeLatency for
//     SpikeFor, Spikes times;
//   - connections cut mid-transaction: the harness watches pg_stat_activity, directly,
//     for a session of the API holding a write transaction (one with a transaction id),
//     and at that moment disables the proxy for a second, which closes every client
//     connection, so the server rolls the transaction back; Cuts times;
//   - an outage: the proxy disabled for Outage.
//
// The API must answer 503 with Retry-After whenever it cannot commit, and never a 201
// for a payment it did not commit; the load retries with the same Idempotency-Key, so
// nothing committed may be lost and nothing committed twice. The verifier reads the
// database directly, so it sees what was really committed: a 201 whose payment is not
// there is the "201 but not committed" part of lost.
type pgFaults struct {
	Spikes                 int
	SpikeLatency, SpikeFor time.Duration
	Cuts                   int
	Outage                 time.Duration

	mu sync.Mutex
	// spikeRTT is the slowest SELECT 1 a connection of the harness's own, through the
	// proxy, saw during each spike.
	spikeRTT []time.Duration
	// cutOpen is, for each cut, how many write transactions of the API were open at it.
	cutOpen []int
	// outage is the window the proxy was down for Outage; EndS -1 while it is.
	outage faults.Window
}

// disrupt runs the three faults in turn, then leaves the proxy clean and waits for the
// run to end.
func (f *pgFaults) disrupt(ctx context.Context, rn *harness.Run) error {
	proxy, restore, err := proxyToBreak(rn.Ports, faults.PostgresProxy)
	if err != nil {
		return err
	}
	defer restore()
	err = f.spikes(ctx, rn, proxy)
	if err == nil {
		err = f.cuts(ctx, rn, proxy)
	}
	if err == nil {
		err = f.outageWindow(ctx, rn, proxy)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	<-ctx.Done()
	return nil
}

const spikeToxic = "chaos_pg_latency"

// spikes delays the database's answers for SpikeFor, Spikes times, and times a
// SELECT 1 of the harness's own through the proxy in each.
func (f *pgFaults) spikes(ctx context.Context, rn *harness.Run, proxy *toxiproxy.Proxy) error {
	for i := range f.Spikes {
		probe, err := pgx.Connect(ctx, faults.ThroughProxy(rn.PaymentsDB, rn.Ports.ProxiedPostgres()))
		if err != nil {
			return fmt.Errorf("connect through %s: %w", proxy.Name, err)
		}
		_, err = proxy.AddToxic(spikeToxic, "latency", "downstream", 1, toxiproxy.Attributes{"latency": f.SpikeLatency.Milliseconds(), "jitter": f.SpikeLatency.Milliseconds() / 4})
		if err != nil {
			probe.Close(ctx)
			return fmt.Errorf("add latency to %s: %w", proxy.Name, err)
		}
		rn.Disrupted("PostgreSQL latency spike", fmt.Sprintf("%d of %d: +%s on every answer for %s", i+1, f.Spikes, f.SpikeLatency, f.SpikeFor))
		end := time.Now().Add(f.SpikeFor)
		start := time.Now()
		_, probeErr := probe.Exec(ctx, "SELECT 1")
		rtt := time.Since(start)
		probe.Close(context.WithoutCancel(ctx))
		if probeErr == nil {
			f.mu.Lock()
			f.spikeRTT = append(f.spikeRTT, rtt)
			f.mu.Unlock()
		}
		waitErr := backoff.Until(ctx, end)
		if err := proxy.RemoveToxic(spikeToxic); err != nil {
			return fmt.Errorf("remove latency from %s: %w", proxy.Name, err)
		}
		if waitErr != nil {
			return waitErr
		}
		if err := backoff.Until(ctx, time.Now().Add(f.SpikeFor)); err != nil {
			return err
		}
	}
	return nil
}

// cuts waits, Cuts times, for the API to hold a write transaction, and cuts every
// connection at that moment. A second of latency on every answer meanwhile keeps each
// transaction open long enough to be seen.
func (f *pgFaults) cuts(ctx context.Context, rn *harness.Run, proxy *toxiproxy.Proxy) error {
	watch, err := watchDatabase(ctx, rn.PaymentsDB, "payments")
	if err != nil {
		return err
	}
	defer watch.Close(context.WithoutCancel(ctx))
	if _, err := proxy.AddToxic(spikeToxic, "latency", "downstream", 1, toxiproxy.Attributes{"latency": 200}); err != nil {
		return fmt.Errorf("add latency to %s: %w", proxy.Name, err)
	}
	defer proxy.RemoveToxic(spikeToxic) //nolint:errcheck // faults.CleanProxy removes it at the end too
	for i := range f.Cuts {
		open, err := waitForWriteTransaction(ctx, watch, 15*time.Second)
		if err != nil {
			return err
		}
		if err := proxy.Disable(); err != nil {
			return fmt.Errorf("disable %s: %w", proxy.Name, err)
		}
		f.mu.Lock()
		f.cutOpen = append(f.cutOpen, open)
		f.mu.Unlock()
		rn.Disrupted("PostgreSQL connections cut", fmt.Sprintf("%d of %d: with %d write transactions of the API open", i+1, f.Cuts, open))
		waitErr := backoff.Until(ctx, time.Now().Add(time.Second))
		if err := proxy.Enable(); err != nil {
			return fmt.Errorf("enable %s: %w", proxy.Name, err)
		}
		if waitErr != nil {
			return waitErr
		}
		if err := backoff.Until(ctx, time.Now().Add(2*time.Second)); err != nil {
			return err
		}
	}
	return nil
}

// waitForWriteTransaction polls pg_stat_activity until another session of the
// database holds a transaction id (it has written and not yet ended), and returns how
// many do; 0 when none came within timeout.
func waitForWriteTransaction(ctx context.Context, conn *pgx.Conn, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		var open int
		err := conn.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL`).Scan(&open)
		if err != nil {
			return 0, fmt.Errorf("read pg_stat_activity: %w", err)
		}
		if open > 0 || time.Now().After(deadline) {
			return open, nil
		}
		if err := backoff.Until(ctx, time.Now().Add(5*time.Millisecond)); err != nil {
			return 0, err
		}
	}
}

// outageWindow disables the proxy for Outage.
func (f *pgFaults) outageWindow(ctx context.Context, rn *harness.Run, proxy *toxiproxy.Proxy) error {
	if err := proxy.Disable(); err != nil {
		return fmt.Errorf("disable %s: %w", proxy.Name, err)
	}
	f.mu.Lock()
	f.outage = faults.Window{Kind: faults.ProxyDown, StartS: time.Since(rn.Origin).Seconds(), EndS: -1}
	f.mu.Unlock()
	rn.Disrupted("PostgreSQL unreachable for the API", fmt.Sprintf("proxy %s disabled for %s", proxy.Name, f.Outage))
	waitErr := backoff.Until(ctx, time.Now().Add(f.Outage))
	if err := proxy.Enable(); err != nil {
		return fmt.Errorf("enable %s: %w", proxy.Name, err)
	}
	f.mu.Lock()
	f.outage.EndS = time.Since(rn.Origin).Seconds()
	f.mu.Unlock()
	rn.Disrupted("PostgreSQL reachable again", "")
	return waitErr
}

// validity: each fault bit, by the harness's own evidence and the clients'; then the
// scenario's SLO rows about what the API answered.
func (f *pgFaults) validity(r *verdict.Report, _ *harness.Run) []verdict.Check {
	f.mu.Lock()
	defer f.mu.Unlock()
	slowest := time.Duration(0)
	for _, rtt := range f.spikeRTT {
		slowest = max(slowest, rtt)
	}
	cutsWithTx := 0
	for _, open := range f.cutOpen {
		if open > 0 {
			cutsWithTx++
		}
	}
	var retries map[string]int
	if r.Evidence != nil {
		retries = r.Evidence.ClientRetries
	}
	refused := retries["status 503 with Retry-After"] + retries["status 503 without Retry-After"] + retries["transport error"]
	outageEnd := f.outage.EndS
	overlap := f.outage.EndS > 0 && r.Evidence != nil && f.outage.StartS < r.Evidence.LoadEndS
	return []verdict.Check{
		verdict.NewCheck(verdict.Validity, "latency spikes: the harness's SELECT 1 through the proxy (slowest)", fmt.Sprintf(">= %s", f.SpikeLatency*3/4),
			fmt.Sprintf("%s in %d of %d spikes", slowest.Round(time.Millisecond), len(f.spikeRTT), f.Spikes), len(f.spikeRTT) == f.Spikes && slowest >= f.SpikeLatency*3/4),
		verdict.NewCheck(verdict.Validity, "connections cut with a write transaction of the API open (pg_stat_activity)", fmt.Sprint(f.Cuts),
			fmt.Sprintf("%d (open at each cut: %v)", cutsWithTx, f.cutOpen), cutsWithTx == f.Cuts),
		verdict.NewCheck(verdict.Validity, "outage of "+f.Outage.String()+" during the load; client attempts refused and retried (503, transport errors)", "> 0",
			fmt.Sprintf("%d (window %.1f s to %.1f s)", refused, f.outage.StartS, outageEnd), overlap && refused > 0),
		verdict.NewCheck(verdict.SLO, "503 without Retry-After", "0", retries["status 503 without Retry-After"], retries["status 503 without Retry-After"] == 0),
		verdict.NewCheck(verdict.SLO, "201 for a payment not committed", "0", r.LostNotCommitted, r.LostNotCommitted == 0),
	}
}
