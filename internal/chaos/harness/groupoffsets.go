package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
)

// GroupOffsets are, per partition of a topic, its first offset (Start), the consumer
// group's committed offset (From; Start where it has committed nothing) and the end
// offset (To).
type GroupOffsets struct {
	Start, From, To map[int32]int64
}

// Lag counts the records past the committed offsets.
func (o GroupOffsets) Lag() int64 {
	var lag int64
	for p, end := range o.To {
		lag += end - o.From[p]
	}
	return lag
}

// ReadGroupOffsets reads the offsets of group on topic.
func ReadGroupOffsets(ctx context.Context, adm *kadm.Client, topic, group string) (GroupOffsets, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	o := GroupOffsets{Start: map[int32]int64{}, From: map[int32]int64{}, To: map[int32]int64{}}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return o, fmt.Errorf("list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return o, fmt.Errorf("list end offsets: %w", err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return o, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	ends.Each(func(end kadm.ListedOffset) {
		start := int64(0)
		if s, ok := starts.Lookup(topic, end.Partition); ok {
			start = s.Offset
		}
		from := start
		if c, ok := committed.Lookup(topic, end.Partition); ok && c.At >= start {
			from = c.At
		}
		o.Start[end.Partition], o.From[end.Partition], o.To[end.Partition] = start, from, end.Offset
	})
	return o, nil
}

// waitConsumerCommitted waits until the consumer group the harness gave the consumer
// has committed every record of the topic, so the verdict is read after the consumer
// has handled the redeliveries too: their decisions already exist, so waiting for
// decisions alone would judge the totals before a double count could show. A consumer
// somebody else runs has no group known to the harness, and is not waited for.
func (rn *Run) waitConsumerCommitted(ctx context.Context, timeout time.Duration) error {
	if rn.Group == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return kafkasec.WithAdmin(rn.Brokers, rn.KafkaOpts, func(adm *kadm.Client) error {
		for {
			offsets, err := ReadGroupOffsets(ctx, adm, rn.Topic, rn.Group)
			if err == nil && offsets.Lag() == 0 {
				return nil
			}
			if werr := backoff.Until(ctx, time.Now().Add(200*time.Millisecond)); werr != nil {
				return fmt.Errorf("wait for consumer group %s to commit the whole topic: %d records left (last error: %v): %w", rn.Group, offsets.Lag(), err, werr)
			}
		}
	})
}
