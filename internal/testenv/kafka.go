package testenv

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

// KafkaBrokers returns the seed brokers of the Kafka cluster the tests use: the
// comma-separated KAFKA_BROKERS when it is set (a broker someone else runs), otherwise the
// native broker of scripts/stack/kafka.sh, which it starts on first use and leaves running.
// It never skips: a test that needs Kafka fails when no broker can be had.
//
// The brokers are reached on the DIRECT listener, which is never behind a proxy; to inject
// faults, see NewKafkaProxy.
func KafkaBrokers(tb testing.TB) []string {
	tb.Helper()
	brokers, err := devstack.KafkaBrokers(os.Getenv)
	if err != nil {
		tb.Fatalf("Kafka for tests: %v", err)
	}
	return brokers
}

// NewTopic creates a topic with the given number of partitions and a name unique to this
// test run, waits until every partition has a leader, and deletes the topic when the test
// ends. Tests that share no topic can run in parallel on one broker.
func NewTopic(tb testing.TB, partitions int32) string {
	tb.Helper()
	adm := newAdmin(tb, KafkaBrokers(tb))
	name := topicName(tb.Name())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := devstack.CreateTopic(ctx, adm, name, partitions); err != nil {
		tb.Fatalf("topic for the test: %v", err)
	}
	tb.Cleanup(func() {
		// The test's context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := devstack.DeleteTopic(ctx, adm, name); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return name
}

// newAdmin returns an admin client closed when the test ends.
func newAdmin(tb testing.TB, brokers []string) *kadm.Client {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatalf("new Kafka admin client: %v", err)
	}
	tb.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// topicName builds "test.<test name>.<8 hex>" from the characters Kafka allows in topic
// names (letters, digits, '.', '_', '-'), at most 249 characters long.
func topicName(testName string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		default:
			return '-'
		}
	}, testName)
	if len(clean) > 200 {
		clean = clean[:200]
	}
	return devstack.UniqueName("test." + clean + ".")
}

// StartToxiproxy runs a Toxiproxy server in-process on a random port, stopped with all its
// proxies when the test ends, and returns a client for its API. Each test gets its own
// server, so toxics never leak between tests. For Kafka, NewKafkaProxy does the wiring.
func StartToxiproxy(tb testing.TB) *toxiclient.Client {
	tb.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	api := httptest.NewServer(srv.Routes())
	tb.Cleanup(func() {
		api.Close()
		if err := srv.Collection.Clear(); err != nil {
			tb.Errorf("stop Toxiproxy proxies: %v", err)
		}
	})
	return toxiclient.NewClient(api.Listener.Addr().String())
}

// IgnoreToxiproxyGoroutines is the goleak option for packages that use StartToxiproxy:
// after a proxy is stopped, a toxic's pipe goroutine inside Toxiproxy can stay blocked
// for a moment. It belongs to the test server, not to the code under test, whose own
// goroutines stay checked.
func IgnoreToxiproxyGoroutines() goleak.Option {
	return goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run")
}

// KafkaProxy is an in-process Toxiproxy proxy in front of the test broker. Add toxics to
// Proxy to inject faults; a client built with ClientOpts sends all its traffic through it.
type KafkaProxy struct {
	// Proxy is the Toxiproxy proxy: AddToxic, RemoveToxic, Disable, Enable.
	Proxy *toxiclient.Proxy
	// Addr is the host:port the proxy listens on.
	Addr string
}

// NewKafkaProxy starts an in-process Toxiproxy (StartToxiproxy) with one proxy on a random
// port in front of the first broker of KafkaBrokers.
//
// Why a dialer is needed: a Kafka client dials the seed only to bootstrap, then dials the
// addresses the broker advertises, which are not the proxy's random port (the DIRECT
// listener advertises itself, PROXIED the native Toxiproxy's proxy: devstack's
// Ports.DirectBroker and Ports.ProxiedBroker). ClientOpts therefore adds a kgo.Dialer
// that sends every connection to the proxy, whatever address the client asked for. That
// is only right for a single-broker cluster, which is what the tests run on.
func NewKafkaProxy(tb testing.TB) *KafkaProxy {
	tb.Helper()
	upstream := KafkaBrokers(tb)[0]
	proxy, err := StartToxiproxy(tb).CreateProxy("kafka", "127.0.0.1:0", upstream)
	if err != nil {
		tb.Fatalf("create Toxiproxy proxy to %s: %v", upstream, err)
	}
	// The API answers with the port it bound for "127.0.0.1:0".
	if _, port, err := net.SplitHostPort(proxy.Listen); err != nil || port == "0" {
		tb.Fatalf("Toxiproxy proxy listens on %q, want a bound port", proxy.Listen)
	}
	return &KafkaProxy{Proxy: proxy, Addr: proxy.Listen}
}

// SlowAnswers makes every answer of the broker reach the client latency late, in
// place of any latency set before (a latency toxic named "slow-answers"). It removes
// the old toxic and adds a new one rather than calling UpdateToxic, which writes the
// latency while the proxy's links read it: a data race inside Toxiproxy that -race
// reports.
func (p *KafkaProxy) SlowAnswers(tb testing.TB, latency time.Duration) {
	tb.Helper()
	const name = "slow-answers"
	if err := p.Proxy.RemoveToxic(name); err != nil && !strings.Contains(err.Error(), "not found") {
		tb.Fatalf("remove toxic %s: %v", name, err)
	}
	if _, err := p.Proxy.AddToxic(name, "latency", "downstream", 1,
		toxiclient.Attributes{"latency": latency.Milliseconds()}); err != nil {
		tb.Fatalf("add toxic %s: %v", name, err)
	}
}

// ClientOpts returns the options that make a kgo client seed from the proxy and reach every
// broker through it. Append them to the options of kgo.NewClient.
func (p *KafkaProxy) ClientOpts() []kgo.Opt {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	return []kgo.Opt{
		kgo.SeedBrokers(p.Addr),
		kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, p.Addr)
		}),
	}
}

// newConsumerFromStart returns a client that reads topic from its start, with short
// fetch waits so that a test's reading ends soon after the last record.
func newConsumerFromStart(tb testing.TB, brokers []string, topic string) *kgo.Client {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		tb.Fatalf("new consumer: %v", err)
	}
	return cl
}

// ConsumeFromStart reads topic from its start until it holds at least want records,
// and fails the test if they are not there within timeout. It returns every record
// read, copies included, in the order the fetches brought them.
func ConsumeFromStart(tb testing.TB, brokers []string, topic string, want int, timeout time.Duration) []*kgo.Record {
	tb.Helper()
	cl := newConsumerFromStart(tb, brokers, topic)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var records []*kgo.Record
	for len(records) < want {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			tb.Fatalf("consumed %d records of topic %s in %s, want %d", len(records), topic, timeout, want)
		}
		if err := fetches.Err(); err != nil {
			tb.Fatalf("consume %s: %v", topic, err)
		}
		records = append(records, fetches.Records()...)
	}
	return records
}

// ConsumeAll reads every record topic holds now: it takes each partition's end offset
// first, then reads from the start until every partition reaches it. Use it when copies
// are expected and their number is unknown, so that no count of records can tell when
// the reading is done; ConsumeFromStart stops at the first want records, which copies
// of early events can fill before the later events are read.
func ConsumeAll(tb testing.TB, brokers []string, topic string, timeout time.Duration) []*kgo.Record {
	tb.Helper()
	cl := newConsumerFromStart(tb, brokers, topic)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		tb.Fatalf("end offsets of %s: %v", topic, err)
	}
	left := map[int32]int64{} // partition: the offset it must reach
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var records []*kgo.Record
	for len(left) > 0 {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			tb.Fatalf("read %d records of topic %s in %s; partitions not read to their end: %v", len(records), topic, timeout, left)
		}
		if err := fetches.Err(); err != nil {
			tb.Fatalf("consume %s: %v", topic, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			records = append(records, r)
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return records
}
