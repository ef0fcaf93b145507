// Command bench measures the service on the native stack and merges the figures into
// reports/bench.json (generated, not tracked). It is a benchmark, not a test: it takes
// minutes and its numbers depend on the machine.
//
//	go run ./cmd/bench api        the API's write rate against the database's own ceiling, and with each relay running
//	go run ./cmd/bench relay      the relay's drain rate, latency and WAL per event, against the floor
//	go run ./cmd/bench ladder     what each of the relay's guarantees costs in the database alone (no Kafka)
//	go run ./cmd/bench cdc        the CDC relay beside the polling relay, and the WAL its slot holds in an outage
//	go run ./cmd/bench consumer   the antifraud consumer against the relay's drain: one instance, three in a group, each event twice
//	go run ./cmd/bench scale      both relays against the backlog's and the table's size; cleanup and partitioned retention
//	go run ./cmd/bench api relay  several benchmarks, in the order given, with default settings
//	go run ./cmd/bench all        every benchmark, in name order, with default settings (the scale curve takes the better part of an hour)
//	go run ./cmd/bench promote    merge reports/bench.json into docs/bench.json, the figures docs/bench.md cites
//
// A single benchmark takes flags after its name (go run ./cmd/bench relay -h lists them),
// for smoke runs with small sizes and for the relay's profiles and plans (docs/bench.md).
//
// PostgreSQL is DATABASE_URL (an admin URL; each benchmark creates its own databases)
// or the native stack's; Kafka is KAFKA_BROKERS or the native stack's direct listener.
// The native servers are started when they are not running (internal/devstack).
//
// This command only reads the command line and runs the benchmarks it names: each is a
// package under internal/bench (api, cdc, consumer, relay with the ladder, scale), set up
// by internal/bench/benchenv, measuring relays with internal/bench/measure.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/api"
	"github.com/dscourse/payments-outbox/internal/bench/cdc"
	"github.com/dscourse/payments-outbox/internal/bench/consumer"
	"github.com/dscourse/payments-outbox/internal/bench/relay"
	"github.com/dscourse/payments-outbox/internal/bench/scale"
	"github.com/dscourse/payments-outbox/internal/benchreport"
)

// A benchmark measures one thing, prints what it found to stdout and merges its
// figures into benchreport.Path (reports/bench.json). It reads its flags from args
// (empty when several run), and DATABASE_URL (an admin URL: it creates databases of its own)
// and KAFKA_BROKERS through getenv.
type benchmark func(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error

// benchmarks are the subcommands, each a package under internal/bench (benchenv sets up
// what they run on, measure measures a relay). A new benchmark is a package with its Run
// and one line here.
func benchmarks() map[string]benchmark {
	return map[string]benchmark{
		"api":      api.Run,
		"cdc":      cdc.Run,
		"consumer": consumer.Run,
		"ladder":   relay.Ladder,
		"relay":    relay.Run,
		"scale":    scale.Run,
	}
}

func main() {
	if err := run(context.Background(), os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if len(args) == 2 && args[1] == "promote" {
		if err := benchreport.Promote(benchreport.Path, benchreport.Published); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "merged %s into %s\n", benchreport.Path, benchreport.Published)
		return nil
	}
	all := benchmarks()
	selected, flags, err := selectBenchmarks(all, args[1:])
	if err != nil {
		return err
	}
	for _, name := range selected {
		fmt.Fprintf(stdout, "== bench %s\n", name)
		start := time.Now()
		if err := all[name](ctx, flags, getenv, stdout); err != nil {
			return fmt.Errorf("benchmark %s: %w", name, err)
		}
		fmt.Fprintf(stdout, "== bench %s took %s\n", name, time.Since(start).Round(time.Second))
	}
	return nil
}

// selectBenchmarks reads the command line after the program's name: one benchmark and
// its flags, several benchmarks without flags, or "all".
func selectBenchmarks(all map[string]benchmark, args []string) (selected, flags []string, err error) {
	names := slices.Sorted(maps.Keys(all))
	usage := fmt.Errorf("usage: bench %s [flags] | bench NAME NAME... | bench all | bench promote", strings.Join(names, "|"))
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "-") })
	if i < 0 {
		i = len(args)
	}
	selected, flags = args[:i], args[i:]
	switch {
	case len(selected) == 0:
		return nil, nil, usage
	case slices.Equal(selected, []string{"all"}) && len(flags) == 0:
		return names, nil, nil
	case slices.Contains(selected, "all"):
		return nil, nil, errors.New("all runs every benchmark with its defaults: it takes no flags and no other names")
	case len(selected) > 1 && len(flags) > 0:
		return nil, nil, fmt.Errorf("flags %q go with one benchmark, not %d", flags, len(selected))
	}
	for _, name := range selected {
		if all[name] == nil {
			return nil, nil, fmt.Errorf("unknown benchmark %q: choose among %s, or all", name, strings.Join(names, ", "))
		}
	}
	return selected, flags, nil
}
