// Package consumer is the consumer benchmark (go run ./cmd/bench consumer): how fast the
// antifraud consumer works through a pre-filled topic of 100,000 PaymentCreated events
// with dedup on, from a fresh group into a fresh database; then the same with every event
// delivered twice (the whole stream, then all of it again, as after a relay that
// republished everything). Figures go to reports/bench.json; the goal is at least half
// the relay's drain rate. Start at Run.
package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/antifraud"
	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/benchreport"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/migrations"
)

const (
	consumerBenchEvents = 100_000
	// consumerBenchUsers spreads the events over users so that velocity queries find
	// history, as in production, without flagging everyone.
	consumerBenchUsers = 5_000
	// consumerBenchTimeout bounds one consumption run.
	consumerBenchTimeout = 10 * time.Minute
)

// Run runs the consumer benchmark and merges its figures into reports/bench.json. It
// takes no flags.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	// The records are produced on the run's client. The fill is not what is measured:
	// large batches, no waiting per record.
	fill := []kgo.Opt{kgo.ProducerLinger(5 * time.Millisecond), kgo.ProducerBatchMaxBytes(1 << 20)}
	return benchenv.Run(ctx, args, getenv, stdout, benchenv.NoFlags("consumer"), func(env benchenv.Env, _ struct{}) error {
		records := consumerBenchRecords(consumerBenchEvents)

		// 1. Every event once.
		once, err := consumerBenchRun(ctx, env, consumerBenchCopy(records), stdout)
		if err != nil {
			return fmt.Errorf("events once: %w", err)
		}
		// 2. Every event twice: the stream, then the same stream again.
		twice, err := consumerBenchRun(ctx, env, append(consumerBenchCopy(records), consumerBenchCopy(records)...), stdout)
		if err != nil {
			return fmt.Errorf("events twice: %w", err)
		}

		fmt.Fprintf(stdout, "consumer, each event once:  %8.0f events/s (%d events)\n", once, consumerBenchEvents)
		fmt.Fprintf(stdout, "consumer, each event twice: %8.0f deliveries/s (%d deliveries, half of them duplicates)\n", twice, 2*consumerBenchEvents)
		return benchreport.Merge(benchreport.Path, map[string]any{
			"consumer_events_per_s":     math.Round(once),
			"consumer_dup_events_per_s": math.Round(twice),
			"consumer_bench_events":     consumerBenchEvents,
			"consumer_bench_note": "events (once) or deliveries (twice) per second, from the consumer's start in a fresh group " +
				"(group join included) until every record is in the database; fresh database each run; max poll 1000",
		})
	}, fill...)
}

// consumerBenchRun fills a fresh topic with records, consumes it with a fresh group into a
// fresh database, checks the outcome, and returns the records consumed per second.
func consumerBenchRun(ctx context.Context, env benchenv.Env, records []*kgo.Record, stdout io.Writer) (float64, error) {
	topic, dropTopic, err := env.CreateTopic(ctx, "bench.consumer")
	if err != nil {
		return 0, err
	}
	defer dropTopic()

	start := time.Now()
	for _, r := range records {
		r.Topic = topic
	}
	if err := consumerBenchProduce(ctx, env.Kafka, records); err != nil {
		return 0, err
	}
	fmt.Fprintf(stdout, "  filled %s with %d records in %s\n", topic, len(records), time.Since(start).Round(time.Millisecond))

	pool, drop, err := env.MigratedPool(ctx, "bench_antifraud", migrations.Antifraud, 0)
	if err != nil {
		return 0, err
	}
	defer drop()

	reg := prometheus.NewRegistry()
	metrics, err := antifraud.NewMetrics(reg)
	if err != nil {
		return 0, err
	}
	consumer, err := antifraud.NewConsumer(pool, antifraud.Config{
		Brokers: env.Brokers,
		Topic:   topic,
		Group:   devstack.UniqueName("bench-antifraud-"),
	}, slog.New(slog.DiscardHandler), metrics)
	if err != nil {
		return 0, err
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	start = time.Now()
	go func() { done <- consumer.Run(runCtx) }()

	// Done when every record is accounted for as processed or duplicate.
	want := float64(len(records))
	deadline := time.Now().Add(consumerBenchTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		seen, err := consumerBenchCounters(reg, "antifraud_processed_total", "antifraud_duplicates_total")
		if err != nil {
			return 0, err
		}
		if seen >= want {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("consumed %.0f of %.0f records within %s", seen, want, consumerBenchTimeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-done:
			return 0, fmt.Errorf("consumer stopped early: %w", err)
		case <-tick.C:
		}
	}
	elapsed := time.Since(start)
	stop()
	if err := <-done; err != nil {
		return 0, fmt.Errorf("stop consumer: %w", err)
	}

	var decisions int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM decisions").Scan(&decisions); err != nil {
		return 0, fmt.Errorf("count decisions: %w", err)
	}
	if decisions != consumerBenchEvents {
		return 0, fmt.Errorf("%d decisions, want %d: one per payment", decisions, consumerBenchEvents)
	}
	return want / elapsed.Seconds(), nil
}

// consumerBenchRecords builds n PaymentCreated records as the relay publishes them.
func consumerBenchRecords(n int) []*kgo.Record {
	records := make([]*kgo.Record, n)
	start := time.Now().Add(-time.Hour).UTC()
	for i := range records {
		p := event.PaymentCreated{
			PaymentID: uuid.New(),
			UserID:    fmt.Sprintf("u-%d", i%consumerBenchUsers),
			Amount:    int64(100 + i%200_000),
			Currency:  "EUR",
			CreatedAt: start.Add(time.Duration(i) * 30 * time.Millisecond),
		}
		payload, _ := json.Marshal(p) // a struct of plain fields always encodes
		envelope := event.Envelope{ID: uuid.New(), Type: event.TypePaymentCreated, Key: p.PaymentID.String(), OccurredAt: p.CreatedAt, Payload: payload}
		records[i] = envelope.Record("", time.Now())
	}
	return records
}

// consumerBenchCopy returns fresh records with the same key, value and headers: the client
// writes into a record it produces, so one record must not be produced twice.
func consumerBenchCopy(records []*kgo.Record) []*kgo.Record {
	out := make([]*kgo.Record, len(records))
	for i, r := range records {
		out[i] = &kgo.Record{Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	return out
}

// consumerBenchProduce writes the records asynchronously and waits for every ack.
func consumerBenchProduce(ctx context.Context, client *kgo.Client, records []*kgo.Record) error {
	errs := make(chan error, 1)
	for _, r := range records {
		client.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := client.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	select {
	case err := <-errs:
		return fmt.Errorf("produce: %w", err)
	default:
		return nil
	}
}

// consumerBenchCounters sums the values of the named counters in reg.
func consumerBenchCounters(reg *prometheus.Registry, names ...string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather metrics: %w", err)
	}
	var sum float64
	found := 0
	for _, f := range families {
		for _, name := range names {
			if f.GetName() == name {
				found++
				for _, m := range f.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	if found != len(names) {
		return 0, errors.New("consumer metrics not registered")
	}
	return sum, nil
}
