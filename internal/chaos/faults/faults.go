package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A Kind is one way of breaking the relay's connection to Kafka.
//
// Why windows and not a "50% toxic": Toxiproxy rolls a toxic's toxicity once per
// connection, when the toxic starts on that connection's link, not per request or per
// chunk (ToxicStub.Run in toxics/toxic.go, https://github.com/Shopify/toxiproxy). Kafka
// clients keep their connections open, so a 50% toxic means either no fault at all or a
// total one. A fault that is shorter than the producer's timeouts only delays bytes and
// produces no failure. So faults are applied fully (toxicity 1) for windows longer than
// the reference relay's publish deadline, with clean windows between. Whether a run is
// valid does not depend on the service's failures, though, nor on its timeouts: see
// evidence.go in package harness.
type Kind string

const (
	// DropRequests black-holes client-to-broker bytes (a timeout toxic upstream with
	// timeout 0): produce requests never arrive.
	DropRequests Kind = "drop_requests"
	// DropAcks black-holes broker-to-client bytes (a timeout toxic downstream): the
	// broker writes the records but the acknowledgement is lost, so the relay
	// publishes again. Without an idempotent producer the topic gets duplicates; with
	// one the broker drops them, which is as correct (the consumer's dedup is
	// exercised by the harness's own copies, see TopicWatch).
	DropAcks Kind = "drop_acks"
	// ProxyDown disables the proxy: open connections are closed and new dials are
	// refused, as if the broker were gone.
	ProxyDown Kind = "proxy_down"
	// SlowAcks delays broker-to-client bytes by SlowAcksLatency (a latency toxic
	// downstream): every produce waits that long for its acknowledgement, so a relay is
	// caught between its send and its mark far more often (replica-pause).
	SlowAcks Kind = "slow_acks"
)

// A Window is a span of time during which one fault was applied.
type Window struct {
	Kind Kind `json:"kind"`
	// StartS and EndS are offsets in seconds from the start of the run.
	StartS float64 `json:"start_s"`
	EndS   float64 `json:"end_s"`
	// Probe is what a Kafka client of the harness's own saw through the proxy one
	// moment into the window: "refused", "no answer" (requests or answers held), or
	// "answered" when the fault was not in force. Empty when the window was not
	// probed.
	Probe string `json:"probe,omitempty"`
	// FailedPublishAttempts is the service's own view, shown beside the harness's
	// evidence and never used for validity: how many publish failures the API
	// counted between the start of this window and the start of the next one (-1 if
	// unknown). A correct relay whose client keeps long timeouts may count none.
	FailedPublishAttempts int `json:"failed_publish_attempts"`
}

// Proxy applies faults to one Toxiproxy proxy and records when.
type Proxy struct {
	proxy  *toxiproxy.Proxy
	client *toxiproxy.Client
	logger *slog.Logger
	origin time.Time
	// failures, when set, reads the API's failure counter so each window records how
	// many publish attempts it broke.
	failures func() (int, bool)

	mu       sync.Mutex
	windows  []Window
	baseline int // failures at the start of the last window
}

// New connects to the Toxiproxy API at apiAddr (e.g. 127.0.0.1:8474) and finds
// the proxy. Times in the recorded windows are offsets from origin.
func New(apiAddr, proxyName string, origin time.Time, logger *slog.Logger) (*Proxy, error) {
	client := toxiproxy.NewClient(apiAddr)
	proxy, err := client.Proxy(proxyName)
	if err != nil {
		return nil, fmt.Errorf("find Toxiproxy proxy %s at %s: %w", proxyName, apiAddr, err)
	}
	return &Proxy{proxy: proxy, client: client, origin: origin, logger: logger.With(slog.String("component", "faults"))}, nil
}

// CountFailures makes each window record the publish failures it caused; read is
// called at the edges of the windows.
func (f *Proxy) CountFailures(read func() (int, bool)) { f.failures = read }

// Reset removes every toxic and re-enables every proxy of the Toxiproxy server, not
// only f's (the relay's, PostgreSQL's and the cluster's): the clean state a run starts
// and ends in, whatever scenario ran before. That is safe on a shared server because
// everything that breaks its proxies holds the run lock (LockRuns: chaos runs, the
// mutants suite, the short chaos test); tests start Toxiproxy servers of their own
// (testenv.StartToxiproxy).
func (f *Proxy) Reset() error {
	if err := f.client.ResetState(); err != nil {
		return fmt.Errorf("reset Toxiproxy: %w", err)
	}
	return nil
}

// SlowAcksLatency is the delay of SlowAcks: well below the relay's 3 s publish timeout
// (harness.relayEnv), so that the acknowledgements still come, only late.
const SlowAcksLatency = 1500 * time.Millisecond

// toxicName names the toxic of a kind, so Clear can find it again.
func toxicName(kind Kind) string { return "chaos_" + string(kind) }

// Inject starts a fault and opens its window.
func (f *Proxy) Inject(kind Kind) error {
	var err error
	switch kind {
	case DropRequests, DropAcks:
		stream := "upstream"
		if kind == DropAcks {
			stream = "downstream"
		}
		// Toxicity must be 1, not 0: the Go client always sends the field, and the
		// server applies a toxic when a random float in [0, 1) is below it, so 0
		// means never (ToxicStub.Run, https://github.com/Shopify/toxiproxy).
		_, err = f.proxy.AddToxic(toxicName(kind), "timeout", stream, 1, toxiproxy.Attributes{"timeout": 0})
	case SlowAcks:
		_, err = f.proxy.AddToxic(toxicName(kind), "latency", "downstream", 1, toxiproxy.Attributes{"latency": SlowAcksLatency.Milliseconds()})
	case ProxyDown:
		err = f.proxy.Disable()
	default:
		err = fmt.Errorf("unknown fault kind %q", kind)
	}
	if err != nil {
		return fmt.Errorf("inject %s: %w", kind, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeCountLocked()
	f.windows = append(f.windows, Window{Kind: kind, StartS: f.since(), EndS: -1, FailedPublishAttempts: -1})
	f.logger.Info("fault on", slog.String("kind", string(kind)))
	return nil
}

// Clear ends a fault. Removing a timeout toxic closes the connections it held, so the
// relay reconnects at once.
func (f *Proxy) Clear(kind Kind) error {
	var err error
	switch kind {
	case DropRequests, DropAcks, SlowAcks:
		err = f.proxy.RemoveToxic(toxicName(kind))
	case ProxyDown:
		err = f.proxy.Enable()
	default:
		err = fmt.Errorf("unknown fault kind %q", kind)
	}
	if err != nil {
		return fmt.Errorf("clear %s: %w", kind, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.windows); n > 0 && f.windows[n-1].EndS < 0 {
		f.windows[n-1].EndS = f.since()
	}
	f.logger.Info("fault off", slog.String("kind", string(kind)))
	return nil
}

// closeCountLocked records the failures counted since the previous window opened into
// that window: the failures a fault causes show up during it and in the clean window
// after it, when timed-out attempts are recorded.
func (f *Proxy) closeCountLocked() {
	if f.failures == nil {
		return
	}
	now, ok := f.failures()
	if !ok {
		return
	}
	if n := len(f.windows); n > 0 {
		f.windows[n-1].FailedPublishAttempts = now - f.baseline
	}
	f.baseline = now
}

// Windows returns the windows so far; a window still open has EndS -1.
func (f *Proxy) Windows() []Window {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeCountLocked()
	return append([]Window(nil), f.windows...)
}

func (f *Proxy) since() float64 { return time.Since(f.origin).Seconds() }

// DutyCycle alternates faulty and clean windows.
type DutyCycle struct {
	// Kinds are applied in turn, one per faulty window. Default: DropAcks, DropRequests,
	// ProxyDown. DropAcks comes first so the first burst of events is written by the
	// broker with its acknowledgements lost: that is what makes a relay publish again.
	Kinds []Kind
	// Faulty is the length of a faulty window; it must exceed the relay's publish
	// deadline or the fault only delays bytes. Default 9 s.
	Faulty time.Duration
	// Clean is the length of a clean window. Default 9 s: Kafka is down about half of
	// the time.
	Clean time.Duration
}

func (c DutyCycle) withDefaults() DutyCycle {
	if len(c.Kinds) == 0 {
		c.Kinds = []Kind{DropAcks, DropRequests, ProxyDown}
	}
	c.Faulty = cmp.Or(c.Faulty, 9*time.Second)
	c.Clean = cmp.Or(c.Clean, 9*time.Second)
	return c
}

// Cycle runs the duty cycle, starting with a faulty window, until ctx ends; it then
// clears the fault in force and returns. The only errors are Toxiproxy API errors.
func (f *Proxy) Cycle(ctx context.Context, cfg DutyCycle) error {
	cfg = cfg.withDefaults()
	for i := 0; ; i++ {
		kind := cfg.Kinds[i%len(cfg.Kinds)]
		if err := f.Hold(ctx, kind, cfg.Faulty); err != nil {
			return err
		}
		if err := backoff.Until(ctx, time.Now().Add(cfg.Clean)); err != nil {
			return nil
		}
	}
}

// Hold applies one fault for d, or until ctx ends, then clears it. The window is
// probed once, right after the fault is on.
func (f *Proxy) Hold(ctx context.Context, kind Kind, d time.Duration) error {
	end := time.Now().Add(d)
	if err := f.Inject(kind); err != nil {
		return err
	}
	seen := probeProxy(ctx, f.proxy.Listen)
	f.mu.Lock()
	f.windows[len(f.windows)-1].Probe = seen
	f.mu.Unlock()
	// The end of ctx only cuts the fault short: it is cleared either way.
	_ = backoff.Until(ctx, end)
	return f.Clear(kind)
}

// probeTimeout bounds a probe: a healthy broker answers a metadata request through
// the proxy within milliseconds.
const probeTimeout = 1500 * time.Millisecond

// probeProxy asks the broker for its metadata through the proxy at addr, with a fresh
// client of the harness's own, and says what the proxy did to the request: the fault as
// Toxiproxy applied it, whatever the service's client does. It tells a fault that was
// not in force apart from a service that was not behind the proxy.
func probeProxy(ctx context.Context, addr string) string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return "probe failed: " + err.Error()
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	err = cl.Ping(ctx)
	switch {
	case err == nil:
		return ProbeAnswered
	case errors.Is(err, syscall.ECONNREFUSED):
		return ProbeRefused
	case ctx.Err() != nil:
		return ProbeNoAnswer
	default:
		return "probe failed: " + err.Error()
	}
}

// What probeProxy can see.
const (
	ProbeAnswered = "answered"
	ProbeRefused  = "refused"
	ProbeNoAnswer = "no answer"
)
