// Package measure is how the benchmarks measure a relay, so that every relay is measured
// by the same code: a Relay is one relay with the table it publishes from (PollRelay,
// internal/outbox's; CDCRelay, internal/outbox/cdc's; the relay benchmark adds its
// minimal ones); MeasureDrain times the drain of a backlog and what it cost the
// database (PGCost); MeasureLatency commits events at a steady rate and times each from
// commit to consumed. Start at Bench, which runs either on a fresh topic.
package measure

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
)

// Bench runs drains and latency measurements on the servers of a run, each on a topic of
// its own.
type Bench struct {
	benchenv.Env
	// Backlog is the events in each drain's backlog.
	Backlog int
	// LatencyRate is the events committed per second in a latency measurement, and
	// LatencyDuration its length.
	LatencyRate     int
	LatencyDuration time.Duration
	// Tracer, when set, sees every statement of the relay's pool during a drain (the
	// relay benchmark's -explain).
	Tracer pgx.QueryTracer
}

// Drain measures one drain of relay on a fresh topic. around is DrainSetup.Around.
func (b Bench) Drain(ctx context.Context, relay Relay, dbURL string, around func() (func() error, error)) (DrainResult, error) {
	topic, dropTopic, err := b.CreateTopic(ctx, "bench.relay-drain")
	if err != nil {
		return DrainResult{}, err
	}
	defer dropTopic()
	return MeasureDrain(ctx, relay, DrainSetup{
		Admin: b.Admin, DBURL: dbURL, Topic: topic, Backlog: b.Backlog, Around: around, Tracer: b.Tracer, Kafka: b.Adm,
	})
}

// Latency measures one latency run of relay on a fresh topic, from a settled server.
func (b Bench) Latency(ctx context.Context, relay Relay, dbURL string) (LatencyResult, error) {
	return b.TracedLatency(ctx, relay, dbURL, "")
}

// TracedLatency is Latency, writing its trace to trace unless that is "".
func (b Bench) TracedLatency(ctx context.Context, relay Relay, dbURL, trace string) (LatencyResult, error) {
	if err := benchenv.Settle(ctx, b.Admin); err != nil {
		return LatencyResult{}, err
	}
	topic, dropTopic, err := b.CreateTopic(ctx, "bench.relay-latency")
	if err != nil {
		return LatencyResult{}, err
	}
	defer dropTopic()
	return MeasureLatency(ctx, relay, LatencySetup{
		DBURL: dbURL, Brokers: b.Brokers, Topic: topic, Rate: b.LatencyRate, Duration: b.LatencyDuration,
		Trace: trace,
	})
}
