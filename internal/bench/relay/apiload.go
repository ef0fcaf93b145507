package relay

// The latency beside the API's load: with -api-load N (the default, 0 turns it off),
// each repetition measures our relay's latency and the floor's once more, each while N
// pgbench clients commit the API's transaction (internal/bench/api's StartLoad) on a
// database of their own on the same server. A relay runs beside the API that feeds it:
// on a small machine they share the CPUs, the database server's and the broker's, and
// a relay whose tail grows faster than the floor's when the machine is busy would miss
// its goal exactly where it runs. Both relays get the same load, started afresh for
// each measurement on an empty database, so neither inherits the other's autovacuum.

import (
	"context"
	"fmt"

	"github.com/dscourse/payments-outbox/internal/bench/api"
	"github.com/dscourse/payments-outbox/internal/bench/measure"
	"github.com/dscourse/payments-outbox/migrations"
)

// defaultAPILoadClients is -api-load's default: pgbench's clients beside the latency
// measurement under load. Four are the relay's own worker count, and on the reference
// machine (2 cores) they commit about 2,700 API transactions per second: the API's
// load, without the HTTP and Go work of the API's own process.
const defaultAPILoadClients = 4

// loadedLatency is one latency measurement beside the API's load.
type loadedLatency struct {
	measure.LatencyResult
	// apiTPS is the load's rate during the measurement: transactions per second.
	apiTPS float64
}

// latencyUnderAPILoad measures relay's latency on dbURL beside the API's load, name
// and rep naming its trace files (latency).
func (b relayBench) latencyUnderAPILoad(ctx context.Context, relay measure.Relay, dbURL, name string, rep int) (loadedLatency, error) {
	var l loadedLatency
	var err error
	l.LatencyResult, err = b.latency(ctx, relay, dbURL, name, rep, func(ctx context.Context) (func() error, error) {
		return b.startAPILoad(ctx, &l.apiTPS)
	})
	return l, err
}

// startAPILoad starts the API's load on a fresh database; the function it returns
// stops it, notes its rate in tps and drops the database.
func (b relayBench) startAPILoad(ctx context.Context, tps *float64) (func() error, error) {
	dbURL, drop, err := b.MigratedDatabase(ctx, "bench_api_load", migrations.Payments)
	if err != nil {
		return nil, err
	}
	load, err := api.StartLoad(ctx, dbURL, b.cfg.apiLoadClients)
	if err != nil {
		drop()
		return nil, err
	}
	return func() error {
		defer drop()
		res, err := load.Stop()
		if err != nil {
			return fmt.Errorf("API load: %w", err)
		}
		*tps = res.TransactionsPerSecond
		return nil
	}, nil
}
