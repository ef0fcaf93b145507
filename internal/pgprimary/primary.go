// Package pgprimary tells when the PostgreSQL server a service writes to is another one
// than before: a standby promoted after the primary was lost, or a switchover.
//
// Following the primary is the driver's work: a multi-host DATABASE_URL with
// target_session_attrs=read-write makes every new connection try the hosts in order
// and keep the first that accepts writes, and the pool replaces the connections the
// old primary took down with it. What the driver does not do is say so. A Watcher,
// installed as the pool's AfterConnect hook, compares the address of each new
// connection's server with the last one and, when it differs, logs the change and
// counts it in postgres_primary_changes_total, so that a failover shows on the
// dashboard and in the log of every service it moved.
//
// The address is the server's identity here, which is what a multi-host URL changes.
// Behind an address that moves with the primary (a virtual IP, a proxy such as
// PgBouncer or HAProxy in front of the cluster) the count stays at 0: the servers'
// own view (pg_stat_replication, the timeline) tells the story there.
package pgprimary

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// Watcher records the server each new connection reached. One Watcher serves every
// pool of a process (they reach the same primary); it is safe for concurrent use.
type Watcher struct {
	logger  *slog.Logger
	changes prometheus.Counter

	mu      sync.Mutex
	current string // the last server's address; empty before the first connection
}

// NewWatcher returns a Watcher whose counter is registered with reg. It fails if reg
// already holds a metric of its name.
func NewWatcher(logger *slog.Logger, reg prometheus.Registerer) (*Watcher, error) {
	w := &Watcher{
		logger: logger.With(slog.String("component", "postgres_primary")),
		changes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postgres_primary_changes_total",
			Help: "New connections that reached the writable PostgreSQL server at another address than the connection before: failovers and switchovers seen by this process.",
		}),
	}
	if err := reg.Register(w.changes); err != nil {
		return nil, fmt.Errorf("register postgres primary metrics: %w", err)
	}
	return w, nil
}

// AfterConnect is the pool's hook (pgxpool.Config.AfterConnect): it records the server
// conn reached and never refuses the connection.
func (w *Watcher) AfterConnect(_ context.Context, conn *pgx.Conn) error {
	w.Connected(conn.PgConn())
	return nil
}

// Connected records the server of conn, a connection just made (the CDC relay's
// replication connection has no pool and calls it itself).
func (w *Watcher) Connected(conn *pgconn.PgConn) {
	w.saw(conn.Conn().RemoteAddr().String())
}

func (w *Watcher) saw(server string) {
	w.mu.Lock()
	previous := w.current
	w.current = server
	w.mu.Unlock()
	switch previous {
	case server:
	case "":
		w.logger.Info("connected to the PostgreSQL primary", slog.String("server", server))
	default:
		w.changes.Inc()
		w.logger.Warn("the PostgreSQL primary changed: new connections reach another server",
			slog.String("previous", previous), slog.String("server", server))
	}
}
