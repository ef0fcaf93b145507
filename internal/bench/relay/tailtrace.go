package relay

// Where a latency measurement's tail comes from, recorded beside it: with
// -latency-trace, every event (measure's trace), every produce request of the relay
// and every fetch of the measuring consumer, as franz-go's hooks time them (when it
// was written, how long it waited to be written, how long until its answer), and the
// Go runtime's GC pauses and scheduling latencies over the measurement; with -trace, a
// Go execution trace of the whole measurement (go tool trace). The relay, the floor,
// the event generator and the consumer share this process, so the runtime's figures
// are theirs together; the hooks tell the relay's requests from the consumer's.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dscourse/payments-outbox/internal/bench/measure"
)

// latency measures relay's latency on dbURL, with beside (nil for none) running
// through it and the diagnostics the flags ask for; name and rep name their files,
// <prefix>-<name>-<rep>.
func (b relayBench) latency(ctx context.Context, relay measure.Relay, dbURL, name string, rep int, beside func(context.Context) (func() error, error)) (measure.LatencyResult, error) {
	c := b.cfg.diagnose
	extras := measure.LatencyExtras{Beside: beside}
	var produces, fetches *requestLog
	if c.latencyTrace != "" {
		extras.Trace = fmt.Sprintf("%s-%s-%d.csv", c.latencyTrace, name, rep)
		produces = &requestLog{key: int16(kmsg.Produce)}
		fetches = &requestLog{key: int16(kmsg.Fetch)}
		relay = withProducerOpts(relay, kgo.WithHooks(produces))
		extras.ConsumerOpts = []kgo.Opt{kgo.WithHooks(fetches)}
		extras.Beside = alongside(extras.Beside, b.runtimeFigures(name, rep))
	}
	if c.goTrace != "" {
		extras.Beside = alongside(extras.Beside, goTrace(fmt.Sprintf("%s-%s-%d.trace", c.goTrace, name, rep)))
	}
	l, err := b.LatencyWith(ctx, relay, dbURL, extras)
	if err != nil || produces == nil {
		return l, err
	}
	if err := produces.write(fmt.Sprintf("%s-%s-%d-produce.csv", c.latencyTrace, name, rep)); err != nil {
		return l, err
	}
	return l, fetches.write(fmt.Sprintf("%s-%s-%d-fetch.csv", c.latencyTrace, name, rep))
}

// withProducerOpts is relay with opts added to its producer's options; the relays
// this benchmark measures take them.
func withProducerOpts(relay measure.Relay, opts ...kgo.Opt) measure.Relay {
	switch r := relay.(type) {
	case measure.PollRelay:
		r.Config.ClientOpts = append(slices.Clip(r.Config.ClientOpts), opts...)
		return r
	case floorRelay:
		r.opts = append(slices.Clip(r.opts), opts...)
		return r
	}
	panic(fmt.Sprintf("withProducerOpts: relay %T takes no producer options", relay))
}

// alongside runs first then second through a measurement, either of them nil, and
// stops them in the reverse order.
func alongside(first, second func(context.Context) (func() error, error)) func(context.Context) (func() error, error) {
	if first == nil {
		return second
	}
	if second == nil {
		return first
	}
	return func(ctx context.Context) (func() error, error) {
		stopFirst, err := first(ctx)
		if err != nil {
			return nil, err
		}
		stopSecond, err := second(ctx)
		if err != nil {
			return nil, errors.Join(err, stopFirst())
		}
		return func() error { return errors.Join(stopSecond(), stopFirst()) }, nil
	}
}

// goTrace writes a Go execution trace of the measurement to path.
func goTrace(path string) func(context.Context) (func() error, error) {
	return func(context.Context) (func() error, error) {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("execution trace: %w", err)
		}
		if err := trace.Start(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("start execution trace: %w", err)
		}
		return func() error {
			trace.Stop()
			return f.Close()
		}, nil
	}
}

// requestLog is a franz-go hook that notes every request of one kind (key): when its
// answer was read, how long it waited to be written, and how long from its write to its
// answer.
type requestLog struct {
	key   int16
	mu    sync.Mutex
	lines []requestLine
}

type requestLine struct {
	done             time.Time
	writeWait, e2e   time.Duration
	written, read, n int
}

func (l *requestLog) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != l.key {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, requestLine{done: time.Now(), writeWait: e2e.WriteWait, e2e: e2e.DurationE2E(), written: e2e.BytesWritten, read: e2e.BytesRead})
}

// write writes the log as CSV, one request a line in the order they were answered.
func (l *requestLog) write(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out strings.Builder
	out.WriteString("answered_unix_ms,write_wait_ms,e2e_ms,bytes_written,bytes_read\n")
	for _, r := range l.lines {
		fmt.Fprintf(&out, "%.1f,%.2f,%.2f,%d,%d\n", float64(r.done.UnixMicro())/1000, millis(r.writeWait), millis(r.e2e), r.written, r.read)
	}
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		return fmt.Errorf("write request log: %w", err)
	}
	return nil
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runtimeMetrics are the Go runtime's histograms that tell a stall of the process
// from a stall outside it: stop-the-world pauses for GC, and how long runnable
// goroutines waited for a CPU.
var runtimeMetrics = []string{"/sched/pauses/total/gc:seconds", "/sched/latencies:seconds"}

// runtimeFigures prints, at the end of the measurement, what the runtime's histograms
// gathered during it: count, p99 and max of each.
func (b relayBench) runtimeFigures(name string, rep int) func(context.Context) (func() error, error) {
	return func(context.Context) (func() error, error) {
		before := readRuntimeMetrics()
		return func() error {
			after := readRuntimeMetrics()
			for i, m := range runtimeMetrics {
				n, p99, maxS := histogramSince(before[i].Value.Float64Histogram(), after[i].Value.Float64Histogram())
				fmt.Fprintf(b.stdout, "  runtime %s rep %d %s: %d, p99 %.2f ms, max %.2f ms\n", name, rep, m, n, p99*1000, maxS*1000)
			}
			return nil
		}, nil
	}
}

func readRuntimeMetrics() []metrics.Sample {
	s := make([]metrics.Sample, len(runtimeMetrics))
	for i, m := range runtimeMetrics {
		s[i].Name = m
	}
	metrics.Read(s)
	return s
}

// histogramSince is the count, the p99 and the max of what after holds beyond before,
// each quantile as its bucket's upper bound.
func histogramSince(before, after *metrics.Float64Histogram) (n uint64, p99, maxS float64) {
	counts := make([]uint64, len(after.Counts))
	for i := range counts {
		counts[i] = after.Counts[i] - before.Counts[i]
		n += counts[i]
	}
	var seen uint64
	for i, c := range counts {
		if c == 0 {
			continue
		}
		seen += c
		upper := after.Buckets[i+1]
		if seen*100 >= n*99 && p99 == 0 {
			p99 = upper
		}
		maxS = upper
	}
	return n, p99, maxS
}
