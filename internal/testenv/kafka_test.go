package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"
)

// consumed is the part of a record the tests compare.
type consumed struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Value     string
	Headers   map[string]string
}

func toConsumed(r *kgo.Record) consumed {
	headers := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		headers[h.Key] = string(h.Value)
	}
	return consumed{r.Topic, r.Partition, r.Offset, string(r.Key), string(r.Value), headers}
}

func TestKafkaProduceConsume(t *testing.T) {
	t.Parallel()
	brokers := KafkaBrokers(t)
	topic := NewTopic(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	producer := newKafkaClient(t, kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	record := &kgo.Record{
		Key:     []byte("payment-42"),
		Value:   []byte(`{"amount_cents":1250}`),
		Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte("0193a1b2-0000-7000-8000-000000000042")}},
	}
	produced, err := producer.ProduceSync(ctx, record).First()
	if err != nil {
		t.Fatalf("produce: %v", err)
	}

	consumer := newKafkaClient(t, kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := pollRecords(ctx, t, consumer, 1)

	want := []consumed{{
		Topic:     topic,
		Partition: produced.Partition,
		Offset:    produced.Offset,
		Key:       "payment-42",
		Value:     `{"amount_cents":1250}`,
		Headers:   map[string]string{"event_id": "0193a1b2-0000-7000-8000-000000000042"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("consumed records mismatch (-want +got):\n%s", diff)
	}
}

// TestKafkaProxyBlackholeFailsProduce shows the fault-injection path: a producer behind an
// in-process Toxiproxy, a blackhole (timeout toxic with timeout 0) on the client-to-broker
// stream, and a produce that fails by its context deadline instead of hanging, because of
// kgo.AllowIdempotentProduceCancellation. Assertions read the topic on the direct path.
func TestKafkaProxyBlackholeFailsProduce(t *testing.T) {
	t.Parallel()
	brokers := KafkaBrokers(t)
	topic := NewTopic(t, 1)
	proxy := NewKafkaProxy(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	producer := newKafkaClient(t, append(proxy.ClientOpts(),
		kgo.DefaultProduceTopic(topic),
		kgo.AllowIdempotentProduceCancellation(),
	)...)
	if err := producer.ProduceSync(ctx, kgo.StringRecord("before")).FirstErr(); err != nil {
		t.Fatalf("produce through the proxy without toxics: %v", err)
	}

	if _, err := proxy.Proxy.AddToxic("blackhole", "timeout", "upstream", 1, toxiclient.Attributes{"timeout": 0}); err != nil {
		t.Fatalf("add toxic: %v", err)
	}
	const produceTimeout = 2 * time.Second
	start := time.Now()
	blackholed, cancelBlackholed := context.WithTimeout(ctx, produceTimeout)
	err := producer.ProduceSync(blackholed, kgo.StringRecord("during")).FirstErr()
	cancelBlackholed()
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("produce while blackholed: got err %v, want %v", err, context.DeadlineExceeded)
	}
	if elapsed > produceTimeout+3*time.Second {
		t.Errorf("produce while blackholed returned after %v, want about %v", elapsed, produceTimeout)
	}

	// Removing a timeout toxic closes the connections it held; the client reconnects.
	if err := proxy.Proxy.RemoveToxic("blackhole"); err != nil {
		t.Fatalf("remove toxic: %v", err)
	}
	if err := producer.ProduceSync(ctx, kgo.StringRecord("after")).FirstErr(); err != nil {
		t.Fatalf("produce after removing the toxic: %v", err)
	}

	// The blackholed request never reached the broker, so "during" was not written.
	consumer := newKafkaClient(t, kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for _, r := range pollRecords(ctx, t, consumer, 2) {
		got = append(got, r.Value)
	}
	if diff := cmp.Diff([]string{"before", "after"}, got); diff != "" {
		t.Errorf("values on the topic mismatch (-want +got):\n%s", diff)
	}
}

func TestKafkaTopicName(t *testing.T) {
	t.Parallel()
	name := topicName("TestX/sub case#1")
	if !strings.HasPrefix(name, "test.TestX-sub-case-1.") {
		t.Errorf("topicName = %q, want prefix %q", name, "test.TestX-sub-case-1.")
	}
	if long := topicName(strings.Repeat("a", 500)); len(long) > 249 {
		t.Errorf("topicName of a 500-char test name has %d chars, want at most 249", len(long))
	}
}

func newKafkaClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("new Kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// pollRecords polls until n records arrived or ctx ends, and fails the test on a fetch error.
func pollRecords(ctx context.Context, t *testing.T, cl *kgo.Client, n int) []consumed {
	t.Helper()
	var got []consumed
	for len(got) < n {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(got), n, err)
		}
		for _, fe := range fetches.Errors() {
			t.Fatalf("fetch %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, toConsumed(r)) })
	}
	return got
}
