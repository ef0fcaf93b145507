package pgfault

import (
	"context"
	"fmt"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// proxyToBreak finds the stack's proxy that find returns, for a disruption to break,
// and a restore that leaves it clean again, read afresh from Toxiproxy. The run's end
// resets every proxy anyway; a disruption restores its own as it returns, so that the
// drain goes at full speed.
func proxyToBreak(ports devstack.Ports, find func(devstack.Ports) (*toxiproxy.Proxy, error)) (proxy *toxiproxy.Proxy, restore func(), err error) {
	proxy, err = find(ports)
	if err != nil {
		return nil, nil, err
	}
	return proxy, func() {
		if p, err := find(ports); err == nil {
			_ = faults.CleanProxy(p)
		}
	}, nil
}

// watchDatabase connects to the database of dbURL directly, not through any proxy,
// for the harness to watch pg_stat_activity while the proxy is broken; which names it
// in the error.
func watchDatabase(ctx context.Context, dbURL, which string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect to the %s database: %w", which, err)
	}
	return conn, nil
}
