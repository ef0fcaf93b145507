package measure

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

// LatencyResult is one latency measurement of one relay.
type LatencyResult struct {
	P50, P99, Max float64 // milliseconds
	// StampedP50 and StampedP99 split the latency at the record's timestamp, which the
	// relay's producer sets when it builds the record, after the claim: commit to
	// stamp is the wait for a claim, the rest is the produce, the broker and the
	// consumer's fetch. Kafka keeps milliseconds, so each is within 1 ms.
	StampedP50, StampedP99 float64
	Events                 int
	AchievedRate           float64 // events committed per second
	// WokenBy is what woke the relay's workers during the measurement (warm-up
	// excluded); nil for a relay without wake-ups.
	WokenBy WakeFigures
}

// LatencySetup is what a latency measurement runs on.
type LatencySetup struct {
	DBURL    string
	Brokers  []string
	Topic    string
	Rate     int // events per second
	Duration time.Duration
	// Tracer, when set, sees every statement of the relay's pool: the claim timer of
	// the scale benchmark.
	Tracer pgx.QueryTracer
	// Trace, when set, is the file each event is written to (writeLatencyTrace).
	Trace string
	// ConsumerOpts are added to the measuring consumer's options.
	ConsumerOpts []kgo.Opt
}

// MeasureLatency empties the relay's table, starts the relay and commits s.Rate events
// per second for s.Duration, calling the relay's wake after each commit as the API calls
// Notify.
func MeasureLatency(ctx context.Context, relay Relay, s LatencySetup) (LatencyResult, error) {
	cfg, err := pgxpool.ParseConfig(s.DBURL)
	if err != nil {
		return LatencyResult{}, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = 32
	genCfg := cfg.Copy() // before the tracer: the generator's statements are not the relay's
	if s.Tracer != nil {
		cfg.ConnConfig.Tracer = s.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return LatencyResult{}, fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	if err := relay.Fill(ctx, pool, 0); err != nil {
		return LatencyResult{}, err
	}

	// The generator's commits wait for the WAL flush, as the API's do. A relay that
	// reads the WAL sees a commit only once it is flushed, whereas a claim sees it as
	// soon as it is visible; with commits that skip the flush (synchronous_commit off),
	// the CDC relay would wait for whoever flushes next, which the API never makes it do.
	genPool, err := pgxpool.NewWithConfig(ctx, genCfg)
	if err != nil {
		return LatencyResult{}, fmt.Errorf("open generator pool: %w", err)
	}
	defer genPool.Close()

	consumer, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.Brokers...), kgo.ConsumeTopics(s.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}, s.ConsumerOpts...)...)
	if err != nil {
		return LatencyResult{}, fmt.Errorf("new consumer: %w", err)
	}
	defer consumer.Close()

	r, err := relay.Start(ctx, pool, s.Topic)
	if err != nil {
		return LatencyResult{}, err
	}
	defer r.Stop() // its error is the drain's concern; here only delivery counts
	if err := warmUp(ctx, genPool, relay, r, consumer); err != nil {
		return LatencyResult{}, err
	}
	// Then the rate itself for a moment, unmeasured, so that the measurement sees the
	// relay in its steady state: every worker on a connection of its own, its
	// statements prepared, the generator's pool open. Both relays get the same.
	warm := StartGenerator(ctx, genPool, relay, r.wake, s.Rate, int(steadyWarmUp.Seconds()*float64(s.Rate)))
	_, err = consume(ctx, consumer, len(warm.keys), steadyWarmUp+time.Minute, warm)
	warm.Wait()
	if err != nil {
		return LatencyResult{}, fmt.Errorf("steady warm-up: %w", err)
	}
	var beforeLoad WakeFigures
	if r.wakeups != nil {
		if beforeLoad, err = r.wakeups(); err != nil {
			return LatencyResult{}, err
		}
	}

	total := int(s.Duration.Seconds() * float64(s.Rate))
	gen := StartGenerator(ctx, genPool, relay, r.wake, s.Rate, total)
	received, err := consume(ctx, consumer, total, s.Duration+time.Minute, gen)
	gen.Wait()
	if err != nil {
		return LatencyResult{}, err
	}
	if gen.err != nil {
		return LatencyResult{}, fmt.Errorf("generate events: %w", gen.err)
	}

	var latencies, toStamp []float64
	for key, at := range gen.committedAt {
		if got, ok := received[key]; ok {
			latencies = append(latencies, millisBetween(at, got.at))
			toStamp = append(toStamp, millisBetween(at, got.stamped))
		}
	}
	if s.Trace != "" {
		if err := writeLatencyTrace(s.Trace, gen, received); err != nil {
			return LatencyResult{}, err
		}
	}
	if len(latencies) < total {
		return LatencyResult{}, fmt.Errorf("received %d of %d events", len(latencies), total)
	}
	slices.Sort(latencies)
	slices.Sort(toStamp)
	result := LatencyResult{
		P50:          Percentile(latencies, 0.50),
		P99:          Percentile(latencies, 0.99),
		Max:          latencies[len(latencies)-1],
		StampedP50:   Percentile(toStamp, 0.50),
		StampedP99:   Percentile(toStamp, 0.99),
		Events:       len(latencies),
		AchievedRate: float64(total) / gen.lastCommit.Sub(gen.start).Seconds(),
	}
	if r.wakeups != nil {
		after, err := r.wakeups()
		if err != nil {
			return LatencyResult{}, err
		}
		result.WokenBy = after.since(beforeLoad)
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
func warmUp(ctx context.Context, pool *pgxpool.Pool, relay Relay, r *Running, consumer *kgo.Client) error {
	key := "warm-up-" + uuid.NewString()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return relay.Insert(ctx, tx, key, []byte(`{}`)) })
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

// Generator stands in for the API: a paced schedule handed to a few committing
// goroutines. Its fields other than mu are read only after wait.
type Generator struct {
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

// StartGenerator commits total events at rate per second through relay.Insert, each of
// its own payment, calling wake after each commit.
func StartGenerator(ctx context.Context, pool *pgxpool.Pool, relay Relay, wake func(), rate, total int) *Generator {
	// UUIDv7 payment ids, as the API makes (the payment id is the aggregate id,
	// indexed in the outbox and its history).
	ids := make([]uuid.UUID, total)
	keys := make(map[string]bool, total)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		keys[ids[i].String()] = true
	}
	g := &Generator{keys: keys, committedAt: make(map[string]time.Time, total), start: time.Now()}
	jobs := make(chan int, rate)
	for range 16 {
		g.workers.Go(func() {
			for i := range jobs {
				p := event.PaymentCreated{PaymentID: ids[i], UserID: fmt.Sprint("u-", i%1000), Amount: 1999, Currency: "EUR", CreatedAt: time.Now()}
				payload, _ := json.Marshal(p) // a struct of plain fields always encodes
				key := p.PaymentID.String()
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return relay.Insert(ctx, tx, key, payload) })
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

// Failed reports whether a commit has failed so far.
func (g *Generator) Failed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err != nil
}

// Wait returns once every event is committed or has failed, with the first failed
// commit's error.
func (g *Generator) Wait() error {
	g.workers.Wait()
	return g.err
}

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
func consume(ctx context.Context, consumer *kgo.Client, total int, timeout time.Duration, gen *Generator) (map[string]arrival, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	received := make(map[string]arrival, total)
	for len(received) < total && !gen.Failed() {
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
// the first commit to its commit, its latency, its wait for a claim (commit to the
// record's timestamp), and its commit's Unix time in milliseconds (to line it up with
// other traces of the same moment). It answers what a percentile cannot: whether the slowest events
// came together (a stall of something) or were spread over the run (queueing).
func writeLatencyTrace(path string, gen *Generator, received map[string]arrival) error {
	type line struct {
		at, latency, toStamp float64
		unixMs               int64
	}
	var lines []line
	for key, at := range gen.committedAt {
		if got, ok := received[key]; ok {
			lines = append(lines, line{millisBetween(gen.start, at), millisBetween(at, got.at), millisBetween(at, got.stamped), at.UnixMilli()})
		}
	}
	slices.SortFunc(lines, func(a, b line) int { return cmp.Compare(a.at, b.at) })
	var out strings.Builder
	out.WriteString("committed_ms,latency_ms,claim_wait_ms,committed_unix_ms\n")
	for _, l := range lines {
		fmt.Fprintf(&out, "%.1f,%.2f,%.0f,%d\n", l.at, l.latency, l.toStamp, l.unixMs)
	}
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		return fmt.Errorf("write latency trace: %w", err)
	}
	return nil
}

// Percentile is the p-quantile of sorted, nearest rank.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}
