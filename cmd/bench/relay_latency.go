package main

// The latency measurement, one code path for every relay: events committed at a steady
// rate, each in its own transaction as the API commits them, and the time from each
// commit's return to the moment a consumer on the topic receives the record. That
// includes Kafka's acknowledgement and the consumer's fetch, so it is an upper bound of
// commit-to-publish, the same bound for every relay.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// latencyResult is one latency measurement of one relay.
type latencyResult struct {
	p50, p99, max float64 // milliseconds
	// stampedP50 and stampedP99 split the latency at the record's timestamp, which the
	// relay's producer sets when it builds the record, after the claim: commit to
	// stamp is the wait for a claim, the rest is the produce, the broker and the
	// consumer's fetch. Kafka keeps milliseconds, so each is within 1 ms.
	stampedP50, stampedP99 float64
	events                 int
	achievedRate           float64 // events committed per second
	// wokenBy is what woke the relay's workers during the measurement (warm-up
	// excluded); nil for a relay without wake-ups.
	wokenBy wakeFigures
}

// latencySetup is what a latency measurement runs on.
type latencySetup struct {
	dbURL    string
	brokers  []string
	topic    string
	rate     int // events per second
	duration time.Duration
	// tracer, when set, sees every statement of the relay's pool: the claim timer of
	// the scale benchmark (scale_history.go).
	tracer pgx.QueryTracer
	// trace, when set, is the file each event is written to (writeLatencyTrace).
	trace string
}

// measureLatency empties the relay's table, starts the relay and commits s.rate events
// per second for s.duration, calling the relay's wake after each commit as the API calls
// Notify.
func measureLatency(ctx context.Context, relay relayUnderTest, s latencySetup) (latencyResult, error) {
	cfg, err := pgxpool.ParseConfig(s.dbURL)
	if err != nil {
		return latencyResult{}, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = 32
	genCfg := cfg.Copy() // before the tracer: the generator's statements are not the relay's
	if s.tracer != nil {
		cfg.ConnConfig.Tracer = s.tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return latencyResult{}, fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	if err := relay.fill(ctx, pool, 0); err != nil {
		return latencyResult{}, err
	}

	// On a small machine the database commits barely more durable transactions per
	// second than the target rate (db_ceiling_tx_per_s in docs/bench.md), so the
	// generator's own commits skip waiting for the WAL flush (synchronous_commit=off,
	// on its own pool). The rows are visible to the relay at the same moment either way,
	// and the relay's statements stay fully durable.
	genCfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	genPool, err := pgxpool.NewWithConfig(ctx, genCfg)
	if err != nil {
		return latencyResult{}, fmt.Errorf("open generator pool: %w", err)
	}
	defer genPool.Close()

	consumer, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...), kgo.ConsumeTopics(s.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return latencyResult{}, fmt.Errorf("new consumer: %w", err)
	}
	defer consumer.Close()

	r, err := relay.start(ctx, pool, s.topic)
	if err != nil {
		return latencyResult{}, err
	}
	defer r.stop() // its error is the drain's concern; here only delivery counts
	if err := warmUp(ctx, genPool, relay, r, consumer); err != nil {
		return latencyResult{}, err
	}
	// Then the rate itself for a moment, unmeasured, so that the measurement sees the
	// relay in its steady state: every worker on a connection of its own, its
	// statements prepared, the generator's pool open. Both relays get the same.
	warm := startGenerator(ctx, genPool, relay, r.wake, s.rate, int(steadyWarmUp.Seconds()*float64(s.rate)))
	_, err = consume(ctx, consumer, len(warm.keys), steadyWarmUp+time.Minute, warm)
	warm.wait()
	if err != nil {
		return latencyResult{}, fmt.Errorf("steady warm-up: %w", err)
	}
	var beforeLoad wakeFigures
	if r.wakeups != nil {
		if beforeLoad, err = r.wakeups(); err != nil {
			return latencyResult{}, err
		}
	}

	total := int(s.duration.Seconds() * float64(s.rate))
	gen := startGenerator(ctx, genPool, relay, r.wake, s.rate, total)
	received, err := consume(ctx, consumer, total, s.duration+time.Minute, gen)
	gen.wait()
	if err != nil {
		return latencyResult{}, err
	}
	if gen.err != nil {
		return latencyResult{}, fmt.Errorf("generate events: %w", gen.err)
	}

	var latencies, toStamp []float64
	for key, at := range gen.committedAt {
		if got, ok := received[key]; ok {
			latencies = append(latencies, millisBetween(at, got.at))
			toStamp = append(toStamp, millisBetween(at, got.stamped))
		}
	}
	if s.trace != "" {
		if err := writeLatencyTrace(s.trace, gen, received); err != nil {
			return latencyResult{}, err
		}
	}
	if len(latencies) < total {
		return latencyResult{}, fmt.Errorf("received %d of %d events", len(latencies), total)
	}
	slices.Sort(latencies)
	slices.Sort(toStamp)
	result := latencyResult{
		p50:          percentile(latencies, 0.50),
		p99:          percentile(latencies, 0.99),
		max:          latencies[len(latencies)-1],
		stampedP50:   percentile(toStamp, 0.50),
		stampedP99:   percentile(toStamp, 0.99),
		events:       len(latencies),
		achievedRate: float64(total) / gen.lastCommit.Sub(gen.start).Seconds(),
	}
	if r.wakeups != nil {
		after, err := r.wakeups()
		if err != nil {
			return latencyResult{}, err
		}
		result.wokenBy = after.since(beforeLoad)
	}
	return result, nil
}

// steadyWarmUp is how long the rate runs, unmeasured, before the measurement.
const steadyWarmUp = 2 * time.Second

// warmUpTimeout bounds the wait for the warm-up event. A started CDC relay's first
// record waits for the walsender to decode the WAL from the slot's restart position up
// to its confirmed one: the server's WAL, every database's writes included, which can be
// gigabytes on a busy server.
const warmUpTimeout = 3 * time.Minute

// warmUp commits one event and waits until the consumer receives it, so that the
// measurement starts with the relay's producer and the consumer connected: neither
// relay's first publish (metadata, producer id) nor the consumer's first fetch is
// counted as latency.
func warmUp(ctx context.Context, pool *pgxpool.Pool, relay relayUnderTest, r *running, consumer *kgo.Client) error {
	key := "warm-up-" + uuid.NewString()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return relay.insert(ctx, tx, key, []byte(`{}`)) })
	if err != nil {
		return fmt.Errorf("commit warm-up event: %w", err)
	}
	r.wake()
	ctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	for {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("warm-up event not received within %s", warmUpTimeout)
		}
		received := false
		fetches.EachRecord(func(rec *kgo.Record) { received = received || string(rec.Key) == key })
		if received {
			return nil
		}
	}
}

// generator stands in for the API: a paced schedule handed to a few committing
// goroutines. Its fields other than mu are read only after wait.
type generator struct {
	// keys are the record keys (payment ids) the generator commits, chosen before it
	// starts, so that a consumer can tell its records from an earlier generator's.
	keys        map[string]bool
	mu          sync.Mutex
	committedAt map[string]time.Time // by record key
	start       time.Time
	lastCommit  time.Time
	err         error // the first failed commit
	workers     sync.WaitGroup
}

// startGenerator commits total events at rate per second through relay.insert, each of
// its own payment, calling wake after each commit.
func startGenerator(ctx context.Context, pool *pgxpool.Pool, relay relayUnderTest, wake func(), rate, total int) *generator {
	// UUIDv7 payment ids, as the API makes (the payment id is the aggregate id,
	// indexed in the outbox and its history).
	ids := make([]uuid.UUID, total)
	keys := make(map[string]bool, total)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		keys[ids[i].String()] = true
	}
	g := &generator{keys: keys, committedAt: make(map[string]time.Time, total), start: time.Now()}
	jobs := make(chan int, rate)
	for range 16 {
		g.workers.Go(func() {
			for i := range jobs {
				p := event.PaymentCreated{PaymentID: ids[i], UserID: fmt.Sprint("u-", i%1000), Amount: 1999, Currency: "EUR", CreatedAt: time.Now()}
				payload, _ := json.Marshal(p) // a struct of plain fields always encodes
				key := p.PaymentID.String()
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return relay.insert(ctx, tx, key, payload) })
				now := time.Now()
				g.mu.Lock()
				if err != nil {
					g.err = cmp.Or(g.err, err)
				} else {
					g.committedAt[key] = now
					g.lastCommit = now
				}
				g.mu.Unlock()
				if err == nil {
					wake()
				}
			}
		})
	}
	// Event i is due at start + i/rate: an absolute schedule catches up after a late
	// wake-up, where a ticker would drop the tick and lower the achieved rate.
	g.workers.Go(func() {
		defer close(jobs)
		due := time.NewTimer(0)
		defer due.Stop()
		for i := range total {
			select {
			case <-ctx.Done():
				return
			case <-due.C:
			}
			jobs <- i
			due.Reset(time.Until(g.start.Add(time.Duration(i+1) * time.Second / time.Duration(rate))))
		}
	})
	return g
}

// failed reports whether a commit has failed so far.
func (g *generator) failed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err != nil
}

// wait returns once every event is committed or has failed.
func (g *generator) wait() { g.workers.Wait() }

// arrival is when a record first reached the consumer, and the timestamp its producer
// gave it.
type arrival struct{ at, stamped time.Time }

// millisBetween is the time from a to b in milliseconds, never negative: the record's
// timestamp has milliseconds only, so it can read a little before the commit returned.
func millisBetween(a, b time.Time) float64 {
	return max(0, float64(b.Sub(a).Microseconds())/1000)
}

// consume receives records until total distinct keys of gen have arrived, gen fails or
// timeout passes, and returns when each key first arrived; records of other keys (an
// earlier generator's) are skipped. A record can arrive
// before its generator goroutine has noted the commit time, so the two are joined
// only at the end.
func consume(ctx context.Context, consumer *kgo.Client, total int, timeout time.Duration, gen *generator) (map[string]arrival, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	received := make(map[string]arrival, total)
	for len(received) < total && !gen.failed() {
		fetches := consumer.PollFetches(ctx)
		now := time.Now()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("received %d of %d events within %s", len(received), total, timeout)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if key := string(r.Key); gen.keys[key] && received[key].at.IsZero() {
				received[key] = arrival{at: now, stamped: r.Timestamp}
			}
		})
	}
	return received, nil
}

// writeLatencyTrace writes one CSV line per event, in commit order: milliseconds from
// the first commit to its commit, its latency, and its wait for a claim (commit to the
// record's timestamp). It answers what a percentile cannot: whether the slowest events
// came together (a stall of something) or were spread over the run (queueing).
func writeLatencyTrace(path string, gen *generator, received map[string]arrival) error {
	type line struct{ at, latency, toStamp float64 }
	var lines []line
	for key, at := range gen.committedAt {
		if got, ok := received[key]; ok {
			lines = append(lines, line{millisBetween(gen.start, at), millisBetween(at, got.at), millisBetween(at, got.stamped)})
		}
	}
	slices.SortFunc(lines, func(a, b line) int { return cmp.Compare(a.at, b.at) })
	var out strings.Builder
	out.WriteString("committed_ms,latency_ms,claim_wait_ms\n")
	for _, l := range lines {
		fmt.Fprintf(&out, "%.1f,%.2f,%.0f\n", l.at, l.latency, l.toStamp)
	}
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		return fmt.Errorf("write latency trace: %w", err)
	}
	return nil
}

// percentile is the p-quantile of sorted, nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}
