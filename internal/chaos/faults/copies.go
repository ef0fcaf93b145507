package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
)

// A TopicWatch follows a run's topic live, on the DIRECT listener, and does two things
// no service can influence:
//
//   - it notes when each payment's event first reached the topic, so that the evidence
//     can tell which events a fault window held back (see Evidence);
//   - it injects duplicates: one event in every CopyEvery gets an extra copy, the same
//     key, headers and payload on the same partition, published by the harness itself.
//     The consumer must absorb these copies whatever the relay does: a relay whose
//     idempotent producer removes its own retry duplicates still leaves the consumer's
//     dedup something to prove.
//
// The copies look exactly like a redelivery (there is no marker a consumer could use to
// skip them); the harness counts them itself, so the report tells them apart from the
// copies the relay's retries wrote. The records a scenario writes to the topic as
// another producer (WatchConfig.Foreign) are left out of what the watch saw: they are
// not the service's.
type TopicWatch struct {
	consumer *kgo.Client
	producer *kgo.Client
	every    int
	origin   time.Time
	logger   *slog.Logger
	done     chan struct{}
	// stop ends the watch once; Stop returns its result every time.
	stop func() TopicSeen
	// brokers and topic are the watch's, for CatchUp; positions is, per partition,
	// the offset after the last record read, control records included (CatchUp).
	brokers   []string
	kafkaOpts []kgo.Opt
	topic     string
	positions sync.Map // int32 -> int64

	// foreign are the records the scenario writes itself (WatchConfig.Foreign).
	foreign *verify.ForeignRecords

	// Owned by the goroutine until done is closed.
	// sightings are the event records read, in order; what the watch saw is made of
	// them once it stops (seen), when every foreign record is known: a scenario learns a
	// record's position only once the broker has acknowledged it, by which time the
	// watch may have read it.
	sightings []sighting
	records   map[string]int // event id -> records seen, the injected copies and foreign records included
	injected  map[string]int // event id -> copies the harness injected
	injectErr error          // the first failed injection, if any
}

// A sighting is one event record the watch read.
type sighting struct {
	eventID   string
	paymentID string // empty when the payload names none
	sequence  int
	at        verify.RecordPosition
	seenS     float64 // seconds from origin
}

// WatchConfig configures a TopicWatch.
type WatchConfig struct {
	// Brokers of the DIRECT listener: the watch must not be behind the faults it
	// observes. Required.
	Brokers []string
	// KafkaOpts reach Brokers besides the address: TLS, SASL. Optional.
	KafkaOpts []kgo.Opt
	// Topic to follow from its start. Required.
	Topic string
	// CopyEvery injects one extra copy of every CopyEvery-th event, the first one
	// included; 0 injects none.
	CopyEvery int
	// Origin is the run's start: times are recorded as seconds from it.
	Origin time.Time
	// Foreign, when set, are the records the scenario writes to the topic itself
	// (harness.Scenario.Foreign), which the watch leaves out of what it saw.
	Foreign *verify.ForeignRecords
	Logger  *slog.Logger
}

// StartTopicWatch starts following the topic. Stop it to get what it saw.
func StartTopicWatch(ctx context.Context, cfg WatchConfig) (*TopicWatch, error) {
	consumer, err := kafkasec.NewClient(cfg.Brokers, cfg.KafkaOpts,
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Records of aborted transactions were never delivered to a consumer that reads
		// committed: they are neither arrivals nor material for copies.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A transaction's commit or abort marker takes an offset too: kept, so that
		// the watch's position can reach the topic's end (CatchUp), then skipped.
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		return nil, fmt.Errorf("new Kafka consumer for the topic watch: %w", err)
	}
	producer, err := kafkasec.NewClient(cfg.Brokers, cfg.KafkaOpts,
		kgo.DefaultProduceTopic(cfg.Topic),
		// A copy goes to its original's partition, as a redelivery would: with the
		// default partitioner it could land elsewhere if the service partitions by
		// another hash of the key.
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		consumer.Close()
		return nil, fmt.Errorf("new Kafka producer for injected copies: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &TopicWatch{
		consumer: consumer, producer: producer, every: cfg.CopyEvery, origin: cfg.Origin, brokers: cfg.Brokers, kafkaOpts: cfg.KafkaOpts, topic: cfg.Topic,
		foreign: cfg.Foreign,
		logger:  cfg.Logger.With(slog.String("component", "topic_watch")),
		done:    make(chan struct{}),
		records: map[string]int{}, injected: map[string]int{},
	}
	w.stop = sync.OnceValue(func() TopicSeen {
		cancel()
		<-w.done
		consumer.Close()
		producer.Close()
		return w.seen()
	})
	go w.run(ctx)
	return w, nil
}

// run polls until ctx ends.
func (w *TopicWatch) run(ctx context.Context) {
	defer close(w.done)
	for {
		fetches := w.consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		// Fetch errors are retried by the client itself; log them so that a watch that
		// sees nothing says why.
		fetches.EachError(func(topic string, partition int32, err error) {
			w.logger.Warn("fetch", slog.String("topic", topic), slog.Int("partition", int(partition)), slog.Any("err", err))
		})
		fetches.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				w.see(ctx, r)
			}
			w.positions.Store(r.Partition, r.Offset+1)
		})
	}
}

// see records one record and, if it is the first copy of an event chosen for it,
// injects a copy.
func (w *TopicWatch) see(ctx context.Context, r *kgo.Record) {
	eventID := headerValue(r, event.HeaderID)
	if eventID == "" {
		return // not an event: the verifier reports it as malformed
	}
	var payload struct {
		PaymentID string `json:"payment_id"`
		Sequence  int    `json:"sequence"` // none in a PaymentCreated
	}
	s := sighting{eventID: eventID, at: verify.RecordPosition{Partition: r.Partition, Offset: r.Offset}, seenS: time.Since(w.origin).Seconds()}
	if json.Unmarshal(r.Value, &payload) == nil && payload.PaymentID != "" {
		s.paymentID, s.sequence = payload.PaymentID, max(payload.Sequence, event.CreatedSequence)
	}
	w.sightings = append(w.sightings, s)
	w.records[eventID]++
	if w.records[eventID] > 1 {
		return
	}
	if w.every <= 0 || (len(w.records)-1)%w.every != 0 {
		return
	}
	if err := w.inject(ctx, r); err != nil {
		w.logger.Warn("inject a copy", slog.String("event_id", eventID), slog.Any("err", err))
		if w.injectErr == nil {
			w.injectErr = err
		}
		return
	}
	w.injected[eventID]++
}

// inject publishes a copy of r and waits for the broker's acknowledgement, so that
// only copies really in the topic are counted.
func (w *TopicWatch) inject(ctx context.Context, r *kgo.Record) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dup := &kgo.Record{
		Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value,
		Headers: r.Headers, Timestamp: r.Timestamp,
	}
	if err := w.producer.ProduceSync(ctx, dup).FirstErr(); err != nil {
		return fmt.Errorf("produce a copy to %s/%d: %w", r.Topic, r.Partition, err)
	}
	return nil
}

// TopicSeen is what a TopicWatch saw.
type TopicSeen struct {
	// FirstSeenS maps a payment id to the seconds from the run's start to the first
	// record of its first event.
	FirstSeenS map[string]float64
	// Partition maps a payment id to the partition of that first record.
	Partition map[string]int32
	// EventSeenS maps an event id to the seconds from the run's start to its first
	// record.
	EventSeenS map[string]float64
	// TransitionSeenS maps a payment id and a sequence (1 for PaymentCreated) to the
	// seconds from the run's start to the first record of that transition, whatever
	// event id it came with.
	TransitionSeenS map[string]map[int]float64
	// Events counts distinct event ids.
	Events int
	// InjectedCopies counts the copies the harness published (and the broker
	// acknowledged).
	InjectedCopies int
	// ServiceCopies counts records beyond the first of each event id that the harness
	// did not inject: the service's own duplicates, e.g. a relay publishing again after
	// lost acknowledgements.
	ServiceCopies int
	// InjectErr is the first injection that failed, if any.
	InjectErr error
}

// Stop ends the watch, waits for it and returns what it saw. Safe to call twice.
func (w *TopicWatch) Stop() TopicSeen { return w.stop() }

// CatchUp waits, at most timeout, until the watch has read every partition up to the
// topic's last stable offset as it is now. The runner's drain ends when the relay has
// marked its last event, which may still be on its way to the watch: stopped at once,
// the watch would report the last events as never seen.
func (w *TopicWatch) CatchUp(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ends kadm.ListedOffsets
	err := kafkasec.WithAdmin(w.brokers, w.kafkaOpts, func(adm *kadm.Client) error {
		var err error
		if ends, err = adm.ListCommittedOffsets(ctx, w.topic); err == nil {
			err = ends.Error()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("topic watch: list end offsets of %s: %w", w.topic, err)
	}
	for {
		behind := 0
		ends.Each(func(o kadm.ListedOffset) {
			if at, _ := w.positions.Load(o.Partition); o.Offset > 0 && (at == nil || at.(int64) < o.Offset) {
				behind++
			}
		})
		if behind == 0 {
			return nil
		}
		if err := backoff.Until(ctx, time.Now().Add(50*time.Millisecond)); err != nil {
			return fmt.Errorf("topic watch: %d partitions of %s not read to their end after %s", behind, w.topic, timeout)
		}
	}
}

// seen sums up the watch, the foreign records left out; call it only after the
// goroutine is done.
func (w *TopicWatch) seen() TopicSeen {
	var foreign map[verify.RecordPosition]string
	if w.foreign != nil {
		foreign = w.foreign.Positions()
	}
	seen := TopicSeen{FirstSeenS: map[string]float64{}, EventSeenS: map[string]float64{}, TransitionSeenS: map[string]map[int]float64{}, Partition: map[string]int32{}, InjectErr: w.injectErr}
	records := map[string]int{}
	for _, s := range w.sightings {
		if _, theirs := foreign[s.at]; theirs {
			continue
		}
		if records[s.eventID]++; records[s.eventID] > 1 {
			continue
		}
		seen.EventSeenS[s.eventID] = s.seenS
		if s.paymentID == "" {
			continue
		}
		// A payment's first event is the one a fault window holds back first: the
		// held-back evidence is about it, not about the later events of the payment.
		if _, ok := seen.FirstSeenS[s.paymentID]; !ok {
			seen.FirstSeenS[s.paymentID] = s.seenS
			seen.Partition[s.paymentID] = s.at.Partition
		}
		if seen.TransitionSeenS[s.paymentID] == nil {
			seen.TransitionSeenS[s.paymentID] = map[int]float64{}
		}
		if _, ok := seen.TransitionSeenS[s.paymentID][s.sequence]; !ok {
			seen.TransitionSeenS[s.paymentID][s.sequence] = s.seenS
		}
	}
	seen.Events = len(records)
	for id, n := range records {
		seen.InjectedCopies += w.injected[id]
		// A copy injected after the watch's last poll was never read back, so this is a
		// lower bound.
		seen.ServiceCopies += max(0, n-1-w.injected[id])
	}
	return seen
}

// headerValue returns the value of r's header key, or "".
func headerValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
