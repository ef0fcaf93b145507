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
	"github.com/twmb/franz-go/pkg/kgo"

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
	return b.LatencyWith(ctx, relay, dbURL, LatencyExtras{Trace: trace})
}

// LatencyExtras are what a latency measurement may run or record beside the relay.
type LatencyExtras struct {
	// Trace, when set, is the file each event is written to (LatencySetup.Trace).
	Trace string
	// Beside, when set, runs through the measurement: it starts once the server has
	// settled (a load started earlier would keep autovacuum busy and the settling
	// waiting), and the function it returns ends it when the measurement is over. An
	// error of either fails the measurement.
	Beside func(context.Context) (func() error, error)
	// ConsumerOpts are added to the measuring consumer's options (hooks that time its
	// fetches).
	ConsumerOpts []kgo.Opt
}

// LatencyWith is Latency with extras.
func (b Bench) LatencyWith(ctx context.Context, relay Relay, dbURL string, extras LatencyExtras) (result LatencyResult, err error) {
	if err := benchenv.Settle(ctx, b.Admin); err != nil {
		return LatencyResult{}, err
	}
	if extras.Beside != nil {
		stop, err := extras.Beside(ctx)
		if err != nil {
			return LatencyResult{}, err
		}
		defer func() {
			if stopErr := stop(); err == nil {
				err = stopErr
			}
		}()
	}
	topic, dropTopic, err := b.CreateTopic(ctx, "bench.relay-latency")
	if err != nil {
		return LatencyResult{}, err
	}
	defer dropTopic()
	return MeasureLatency(ctx, relay, LatencySetup{
		DBURL: dbURL, Brokers: b.Brokers, Topic: topic, Rate: b.LatencyRate, Duration: b.LatencyDuration,
		Trace: extras.Trace, ConsumerOpts: extras.ConsumerOpts,
	})
}
