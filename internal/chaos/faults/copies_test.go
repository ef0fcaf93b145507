package faults

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// A real broker: six events, one of them published twice by "the service". The watch,
// copying every second event, must inject three copies that are indistinguishable from
// their originals (key, value, headers, partition), tell them apart from the service's
// own copy, and note when each payment's event arrived.
func TestTopicWatchInjectsExactCopies(t *testing.T) {
	t.Parallel()
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.NewTopic(t, 3)
	origin := time.Now()
	watch := startWatch(t, WatchConfig{Brokers: brokers, Topic: topic, CopyEvery: 2, Origin: origin})
	producer := newProducer(t, brokers, topic)
	var records []*kgo.Record
	for n := range 6 {
		records = append(records, &kgo.Record{
			Key:   fmt.Appendf(nil, "user-%d", n),
			Value: fmt.Appendf(nil, `{"payment_id":"p%d","amount":%d}`, n, 1000+n),
			Headers: []kgo.RecordHeader{
				{Key: event.HeaderID, Value: fmt.Appendf(nil, "e%d", n)},
				{Key: event.HeaderType, Value: []byte("payment.created")},
			},
		})
	}
	serviceCopy := *records[2] // a relay publishing e2 again after a lost ack
	if err := producer.ProduceSync(t.Context(), append(records, &serviceCopy)...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	// 6 events + the service's copy + 3 injected copies.
	got := readRecords(t, brokers, topic, 10)
	// The test's reader can be ahead of the watch: stop it only once it has read back
	// all ten records, or the last injected copy would pass for none and a copy the
	// service wrote would be counted as injected.
	if err := watch.CatchUp(t.Context(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	seen := watch.Stop()
	if seen.Events != 6 || seen.InjectedCopies != 3 || seen.ServiceCopies != 1 || seen.InjectErr != nil {
		t.Errorf("events/injected/service copies/error: got %d/%d/%d/%v, want 6/3/1/<nil>", seen.Events, seen.InjectedCopies, seen.ServiceCopies, seen.InjectErr)
	}
	for n := range 6 {
		id := fmt.Sprintf("p%d", n)
		if s, ok := seen.FirstSeenS[id]; !ok || s < 0 || s > time.Since(origin).Seconds() {
			t.Errorf("first seen of %s: got %v (known %t), want within the test", id, s, ok)
		}
		// A payload without a sequence is a creation, sequence 1.
		if s, ok := seen.TransitionSeenS[id][event.CreatedSequence]; !ok || s != seen.FirstSeenS[id] {
			t.Errorf("first seen of %s's creation: got %v (known %t), want its first event's %v", id, s, ok, seen.FirstSeenS[id])
		}
	}

	// Every copy of an event id is the same record, on the same partition.
	type shape struct {
		Partition  int32
		Key, Value string
		Headers    []kgo.RecordHeader
	}
	byID := map[string][]shape{}
	for _, r := range got {
		id := headerValue(r, event.HeaderID)
		byID[id] = append(byID[id], shape{r.Partition, string(r.Key), string(r.Value), r.Headers})
	}
	copies := 0
	for id, shapes := range byID {
		for _, s := range shapes[1:] {
			if diff := cmp.Diff(shapes[0], s); diff != "" {
				t.Errorf("a copy of %s differs from its original (-original +copy):\n%s", id, diff)
			}
		}
		copies += len(shapes) - 1
	}
	if copies != 4 {
		t.Errorf("copies beyond the first per event id: got %d, want 4 (3 injected, 1 the service's)", copies)
	}
}

// startWatch starts a watch that the end of the test stops.
func startWatch(t *testing.T, cfg WatchConfig) *TopicWatch {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	watch, err := StartTopicWatch(t.Context(), cfg)
	if err != nil {
		t.Fatalf("start watch: %v", err)
	}
	t.Cleanup(func() { watch.Stop() })
	return watch
}

// newProducer is a client that produces to topic, closed at the end of the test.
func newProducer(t *testing.T, brokers []string, topic string) *kgo.Client {
	t.Helper()
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	return producer
}

// readRecords reads the topic from its start until it has n records, and fails the
// test after 30 s.
func readRecords(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	return testenv.ConsumeFromStart(t, brokers, topic, n, 30*time.Second)
}

// The runner stops the watch right after the drain, when the relay's last records may
// not have reached it yet: CatchUp must hold the stop until the watch has read the topic
// to its end, transaction markers included (a student's relay may publish in
// transactions, and a marker's offset is never returned as a record).
func TestTopicWatchCatchesUpBeforeItStops(t *testing.T) {
	t.Parallel()
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.NewTopic(t, 3)
	watch, err := StartTopicWatch(t.Context(), WatchConfig{Brokers: brokers, Topic: topic, Origin: time.Now(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("start watch: %v", err)
	}
	t.Cleanup(func() { watch.Stop() })
	record := func(n int) *kgo.Record {
		return &kgo.Record{Key: fmt.Appendf(nil, "p%d", n), Value: fmt.Appendf(nil, `{"payment_id":"p%d"}`, n),
			Headers: []kgo.RecordHeader{{Key: event.HeaderID, Value: fmt.Appendf(nil, "e%d", n)}}}
	}
	const each = 30

	// First a committed transaction, its markers written (the topic stable to its end).
	txn, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("catch-up-"+topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txn.Close)
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for n := range each {
		if err := txn.ProduceSync(t.Context(), record(n)).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	if err := txn.EndTransaction(t.Context(), kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
	adm := kadm.NewClient(txn)
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		stable, err1 := adm.ListCommittedOffsets(t.Context(), topic)
		ends, err2 := adm.ListEndOffsets(t.Context(), topic)
		same := err1 == nil && err2 == nil
		ends.Each(func(o kadm.ListedOffset) {
			s, _ := stable.Lookup(topic, o.Partition)
			same = same && s.Offset == o.Offset
		})
		return same, "the transaction's markers not all written"
	})
	// Then plain records on partition 0 only, so that the other partitions end with a
	// marker, and the stop right after their acks, as after a drain.
	plain, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Close)
	for n := each; n < 2*each; n++ {
		if err := plain.ProduceSync(t.Context(), record(n)).FirstErr(); err != nil { // Partition is 0
			t.Fatalf("produce: %v", err)
		}
	}

	if err := watch.CatchUp(t.Context(), 10*time.Second); err != nil {
		t.Fatalf("catch up: %v", err)
	}
	if seen := watch.Stop(); seen.Events != 2*each {
		t.Errorf("the watch saw %d events, want all %d", seen.Events, 2*each)
	}
}

// A record another producer of the harness wrote (a scenario's, registered in Foreign
// once the broker acknowledged it, after the watch may have read it) is not the
// service's: it neither counts as the service's copy nor as the first sighting of its
// event, which is the service's own record that came after it.
func TestTopicWatchLeavesOutForeignRecords(t *testing.T) {
	t.Parallel()
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.NewTopic(t, 1)
	foreign := &verify.ForeignRecords{}
	origin := time.Now()
	watch := startWatch(t, WatchConfig{Brokers: brokers, Topic: topic, Origin: origin, Foreign: foreign})
	producer := newProducer(t, brokers, topic)
	refund := &kgo.Record{Key: []byte("p"), Value: []byte(`{"payment_id":"p","sequence":2}`),
		Headers: []kgo.RecordHeader{{Key: event.HeaderID, Value: []byte("e2")}}}

	early, err := producer.ProduceSync(t.Context(), refund).First()
	if err != nil {
		t.Fatalf("produce the early copy: %v", err)
	}
	// The watch has read the early copy before the service's record leaves.
	if err := watch.CatchUp(t.Context(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	foreign.Add(verify.RecordPosition{Partition: early.Partition, Offset: early.Offset}, verify.CopyKind)
	afterEarly := time.Since(origin).Seconds()
	service := *refund
	if err := producer.ProduceSync(t.Context(), &service).FirstErr(); err != nil {
		t.Fatalf("produce the service's record: %v", err)
	}
	if err := watch.CatchUp(t.Context(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	seen := watch.Stop()
	if seen.Events != 1 || seen.ServiceCopies != 0 {
		t.Errorf("events/service copies: got %d/%d, want 1/0", seen.Events, seen.ServiceCopies)
	}
	if s := seen.TransitionSeenS["p"][2]; s < afterEarly {
		t.Errorf("payment p's sequence 2 first seen at %.3f s, want the service's record, after %.3f s", s, afterEarly)
	}
}
