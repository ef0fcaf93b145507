package measure

import (
	"errors"
	"flag"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/benchreport"
)

// Flags are the flags shared by the benchmarks that measure relays (relay, cdc, scale):
// how large a drain is, how many repetitions, the latency measurement's rate and
// length, and where the figures go. A benchmark embeds them in its own configuration.
type Flags struct {
	Backlog         int           // events per drain; -backlog, default 100,000
	Reps            int           // repetitions; -reps, default 3
	LatencyRate     int           // events per second; -latency-rate, default 1,000
	LatencyDuration time.Duration // -latency-duration, default 15s
	Report          string        // where the figures go; -report, default reports/bench.json

	// withBacklog is whether Define defined -backlog: the scale benchmark has its own
	// list of sizes instead.
	withBacklog bool
}

// Define defines the shared flags on fs, -backlog only when withBacklog.
func (f *Flags) Define(fs *flag.FlagSet, withBacklog bool) {
	f.withBacklog = withBacklog
	if withBacklog {
		fs.IntVar(&f.Backlog, "backlog", 100_000, "events in each drain's backlog")
	}
	fs.IntVar(&f.Reps, "reps", 3, "repetitions; each figure is their median, with min and max")
	fs.IntVar(&f.LatencyRate, "latency-rate", 1000, "events committed per second in each latency measurement")
	fs.DurationVar(&f.LatencyDuration, "latency-duration", 15*time.Second, "length of each latency measurement")
	fs.StringVar(&f.Report, "report", benchreport.Path, "JSON report to merge the figures into")
}

// Check reports flags out of range, once fs has parsed them.
func (f Flags) Check() error {
	if f.withBacklog && f.Backlog < 1 {
		return errors.New("-backlog must be positive")
	}
	if f.Reps < 1 || f.LatencyRate < 1 || f.LatencyDuration < time.Second {
		return errors.New("-reps and -latency-rate must be positive and -latency-duration at least 1s")
	}
	return nil
}

// Bench is a Bench on env with these sizes.
func (f Flags) Bench(env benchenv.Env) Bench {
	return Bench{Env: env, Backlog: f.Backlog, LatencyRate: f.LatencyRate, LatencyDuration: f.LatencyDuration}
}
