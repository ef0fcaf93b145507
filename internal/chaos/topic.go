package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// TopicContents is everything the verifier learned from reading a topic end to end.
type TopicContents struct {
	// Records counts every record, copies included.
	Records int
	// EventCopies counts the records of each X-Event-Id.
	EventCopies map[string]int
	// PaymentEvents counts the records about each payment id (from the payload).
	PaymentEvents map[string]int
	// Malformed counts records without an X-Event-Id or a payment_id: contract
	// violations, reported in the notes.
	Malformed int
}

// ReadTopic reads every partition of topic from its start offset to the high watermark
// it had when the call began, with a client of its own (no consumer group, so it
// disturbs no one and commits nothing). Use the DIRECT listener: the verifier must not
// be behind the faults it judges.
func ReadTopic(ctx context.Context, brokers []string, topic string) (TopicContents, error) {
	contents := TopicContents{EventCopies: map[string]int{}, PaymentEvents: map[string]int{}}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return contents, fmt.Errorf("new Kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return contents, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return contents, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}

	// remaining: the partitions that still have records before their end offset.
	remaining := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(topic, o.Partition)
		if o.Offset > start.Offset {
			remaining[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().At(start.Offset)
		}
	})
	if len(remaining) == 0 {
		return contents, nil
	}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchMaxWait(250*time.Millisecond),
	)
	if err != nil {
		return contents, fmt.Errorf("new Kafka consumer: %w", err)
	}
	defer cl.Close()
	for len(remaining) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return contents, fmt.Errorf("read topic %s: %d partitions unfinished: %w", topic, len(remaining), err)
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			return contents, fmt.Errorf("read topic %s: %w", topic, fetchErr)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return // written after the call began
			}
			contents.add(r)
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return contents, nil
}

// add counts one record.
func (c *TopicContents) add(r *kgo.Record) {
	c.Records++
	var eventID string
	for _, h := range r.Headers {
		if h.Key == event.HeaderID {
			eventID = string(h.Value)
		}
	}
	var payload struct {
		PaymentID string `json:"payment_id"`
	}
	_ = json.Unmarshal(r.Value, &payload)
	if eventID == "" || payload.PaymentID == "" {
		c.Malformed++
	}
	if eventID != "" {
		c.EventCopies[eventID]++
	}
	if payload.PaymentID != "" {
		c.PaymentEvents[payload.PaymentID]++
	}
}

// Unique counts distinct event ids.
func (c TopicContents) Unique() int { return len(c.EventCopies) }
