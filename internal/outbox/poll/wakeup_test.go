package poll

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/outboxtest"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// Each loss of the LISTEN connection after it worked is a new incident: the reconnect
// must start from the shortest backoff again, or after a few database restarts every
// reconnect waits the 10 s cap while the relay falls back to polling.
func TestListenReconnectsPromptlyAfterEveryLoss(t *testing.T) {
	t.Parallel()
	b := setup(t)
	relayPool := b.poolNamed(t, "outbox_listen_test", "")
	r, err := NewRelay(relayPool, b.cfg, b.logger, b.metrics)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	startListener(t, r)

	pid := b.waitForListener(t, 0, 5*time.Second)
	// Without the reset the 6th reconnect waits at least 1.6 s.
	for round := range 7 {
		if n := b.count(t, `SELECT count(*) FROM (SELECT pg_terminate_backend($1::int)) AS t(ok) WHERE ok`, pid); n != 1 {
			t.Fatalf("round %d: terminated %d listening backends, want 1", round, n)
		}
		pid = b.waitForListener(t, pid, time.Second)
	}
}

// A LISTEN connection over a dead TCP link gets no error, only silence, for as long as
// the kernel keeps the socket (minutes). The listener must notice within a bounded
// time and reconnect.
func TestListenNoticesADeadLink(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &outboxtest.LogBuffer{}
	b.logger = logs.Logger()
	proxy, err := testenv.StartToxiproxy(t).CreateProxy("postgres", "127.0.0.1:0", b.pool.Config().ConnConfig.Host+":"+
		fmt.Sprint(b.pool.Config().ConnConfig.Port))
	if err != nil {
		t.Fatalf("create Toxiproxy proxy to PostgreSQL: %v", err)
	}
	r, err := NewRelay(b.poolNamed(t, "outbox_dead_link_test", proxy.Listen), b.cfg, b.logger, b.metrics)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	startListener(t, r)
	b.waitForListener(t, 0, 5*time.Second)

	// Bytes vanish both ways; the connections stay open.
	if _, err := proxy.AddToxic("blackhole", "timeout", "upstream", 1, toxiclient.Attributes{"timeout": 0}); err != nil {
		t.Fatalf("add toxic: %v", err)
	}
	testenv.WaitFor(t, 4*b.cfg.QueryTimeout, func() (bool, string) {
		return strings.Contains(logs.String(), "LISTEN connection lost"), "the listener has not noticed the dead link"
	})
}

// poolNamed returns a second pool on the test database whose connections carry
// applicationName, so the test can find them in pg_stat_activity, reaching the server
// through addr (host:port) if it is not empty.
func (b *testBundle) poolNamed(t *testing.T, applicationName, addr string) *pgxpool.Pool {
	t.Helper()
	// A config of its own: Config's copy shares RuntimeParams with b.pool.
	cfg, err := pgxpool.ParseConfig(b.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = applicationName
	if addr != "" {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		var p uint16
		if _, err := fmt.Sscan(port, &p); err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, p
		cfg.ConnConfig.Fallbacks = nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open pool %s: %v", applicationName, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// waitForListener waits until a backend other than old holds LISTEN on the outbox
// channel, and returns its pid.
func (b *testBundle) waitForListener(t *testing.T, old int, timeout time.Duration) int {
	t.Helper()
	var pid int
	testenv.WaitFor(t, timeout, func() (bool, string) {
		pid = b.count(t, `
			SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> $1
			  AND application_name LIKE 'outbox_%_test' AND (query LIKE 'LISTEN%' OR query = '-- ping')`, old)
		return pid != 0, fmt.Sprintf("no listening backend other than %d", old)
	})
	return pid
}

// startListener runs r's listener alone until the test ends.
func startListener(t *testing.T, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.listen(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// The wake-up metrics say which path woke the worker that claimed an event, so that
// docs/bench.md can tell what wakes the relay at 1,000 events/s. With polling an hour
// apart and no nudge from this process, only the NOTIFY of the commit can have woken
// it, and Notify is counted as a nudge.
func TestClaimsAreCountedByWhatWokeTheWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.PollInterval = time.Hour
	r, err := NewRelay(b.poolNamed(t, "outbox_wakeup_test", ""), b.cfg, b.logger, b.metrics)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	startRelay(t, r)
	b.waitForListener(t, 0, 5*time.Second)

	// The workers' first claims, at their start, count as polls: let them pass.
	b.insert(t, newMessage(t, "warm-up", 0))
	b.waitAllPublished(t, 1, 15*time.Second)
	// The worker that published the warm-up claims once more before it goes idle. A
	// commit during that claim is seen by it (woken "busy") or left to it ("nudge"),
	// not woken by its NOTIFY: wait until no worker is in a streak.
	testenv.WaitFor(t, 5*time.Second, func() (bool, string) {
		r.busy.mu.Lock()
		defer r.busy.mu.Unlock()
		return r.busy.n == 0, fmt.Sprintf("%d workers still in a streak", r.busy.n)
	})
	claims := func(source wakeSource) float64 {
		return testutil.ToFloat64(b.metrics.claims.WithLabelValues(string(source)))
	}
	notified, polled := claims(wokenByNotify), claims(wokenByPoll)

	b.insert(t, newMessage(t, "by-notify", 0))
	b.waitAllPublished(t, 2, 15*time.Second)
	if got := claims(wokenByNotify) - notified; got != 1 {
		t.Errorf("claims woken by NOTIFY: %v, want 1", got)
	}
	if got := claims(wokenByPoll) - polled; got != 0 {
		t.Errorf("claims woken by a poll: %v, want 0 (polls are an hour apart)", got)
	}
	if got := claims(wokenByNudge); got != 0 {
		t.Errorf("claims woken by a nudge: %v, want 0 (nothing called Notify)", got)
	}
}
