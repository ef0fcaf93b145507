package pgfailover

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/backoff"
)

// probeEvery is how often the watch asks each node what it is: the no-primary
// windows are known to a tenth of a second, finer than the clients' first retry
// (250 ms).
const probeEvery = 100 * time.Millisecond

// A node is what one node said of itself at one probe.
type node struct {
	// Answered: the connection and the query succeeded within a second.
	Answered bool
	// Primary: pg_is_in_recovery() was false, so it accepted writes.
	Primary bool
	// Timeline is the timeline of the WAL a primary writes (the first eight hex digits
	// of pg_walfile_name(pg_current_wal_lsn())); 0 for a standby. The timeline of
	// pg_control_checkpoint() would lag: it changes only when the checkpoint that
	// follows a promotion ends, and a promoted server spreads that one out.
	Timeline int
}

// A tick is one probe of both nodes.
type tick struct {
	AtS   float64 // seconds from the run's start
	Nodes [2]node // node 1, node 2
}

// A roleWatch probes both nodes of a pair every probeEvery, each on a connection of
// its own that it closes again, so that a node counts as answering only if it takes a
// new connection, as a client's pool needs.
type roleWatch struct {
	mu    sync.Mutex
	ticks []tick
	stop  context.CancelFunc
	done  chan struct{}
}

// startRoleWatch starts probing the pair until Stop.
func startRoleWatch(ctx context.Context, p *pair, origin time.Time) *roleWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &roleWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			next := time.Now().Add(probeEvery)
			t := tick{AtS: time.Since(origin).Seconds()}
			for i := range t.Nodes {
				t.Nodes[i] = probe(ctx, p.nodeURL(i+1))
			}
			if ctx.Err() != nil {
				return // a probe cut short by Stop says nothing of the node
			}
			w.mu.Lock()
			w.ticks = append(w.ticks, t)
			w.mu.Unlock()
			if backoff.Until(ctx, next) != nil {
				return
			}
		}
	}()
	return w
}

// probe asks one node, within a second, whether it is in recovery and which timeline
// it writes.
func probe(ctx context.Context, url string) node {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return node{}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var standby bool
	var timeline int
	err = conn.QueryRow(ctx, `
		SELECT pg_is_in_recovery(),
		       CASE WHEN pg_is_in_recovery() THEN 0
		            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`).Scan(&standby, &timeline)
	if err != nil {
		return node{}
	}
	return node{Answered: true, Primary: !standby, Timeline: timeline}
}

// last returns the latest tick, and false before the first.
func (w *roleWatch) last() (tick, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ticks) == 0 {
		return tick{}, false
	}
	return w.ticks[len(w.ticks)-1], true
}

// Stop ends the probes and returns every tick. Safe to call twice.
func (w *roleWatch) Stop() []tick {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ticks
}
