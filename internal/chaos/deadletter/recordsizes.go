package deadletter

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
)

// A RecordSize is one record that had a record batch to itself, and the size of that
// batch.
type RecordSize struct {
	EventID string
	Type    string
	Large   bool // the user id is a largest payment's (load.LargestUserIDPrefix)
	Bytes   int
}

// RecordSizes reads the topic from the start to its current end and returns every
// record that had a record batch to itself, with the size of that batch as the broker
// measures it against max.message.bytes, and how many records shared a batch.
//
// franz-go's fetch hook reports each batch's records section, compressed, in offset
// order per partition, before the batch's records are polled; the v2 batch header
// adds recordBatchOverhead bytes. Zipping a partition's batches with its records in
// offset order tells which record was alone in which batch.
func RecordSizes(ctx context.Context, brokers []string, topic string) ([]RecordSize, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var total int64
	err := kafkasec.WithAdmin(brokers, nil, func(adm *kadm.Client) error {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	hook := &batchSizeHook{batches: map[int32][]kgo.FetchBatchMetrics{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(hook))
	if err != nil {
		return nil, 0, fmt.Errorf("new Kafka consumer: %w", err)
	}
	defer cl.Close()
	records := map[int32][]*kgo.Record{}
	for read := int64(0); read < total; {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("read topic %s: %d of %d records: %w", topic, read, total, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			records[r.Partition] = append(records[r.Partition], r)
			read++
		})
	}
	var sizes []RecordSize
	shared := 0
	for partition, recs := range records {
		batches := hook.of(partition)
		for _, b := range batches {
			if len(recs) == 0 {
				break // fetched, not polled yet
			}
			if b.NumRecords < 1 || b.NumRecords > len(recs) {
				return nil, 0, fmt.Errorf("read topic %s: partition %d: a batch of %d records where %d remain", topic, partition, b.NumRecords, len(recs))
			}
			if b.NumRecords > 1 {
				shared += b.NumRecords
			} else {
				sizes = append(sizes, sizeOf(recs[0], b.CompressedBytes+recordBatchOverhead))
			}
			recs = recs[b.NumRecords:]
		}
		if len(recs) > 0 {
			return nil, 0, fmt.Errorf("read topic %s: partition %d: %d records without their batch", topic, partition, len(recs))
		}
	}
	return sizes, shared, nil
}

// sizeOf classifies a record by its type header and its payload's user id.
func sizeOf(r *kgo.Record, bytes int) RecordSize {
	var payload struct {
		UserID string `json:"user_id"`
	}
	_ = json.Unmarshal(r.Value, &payload) // a record of another shape is simply not large
	headers := event.HeaderValues(r)
	return RecordSize{EventID: headers[event.HeaderID], Type: headers[event.HeaderType], Large: strings.HasPrefix(payload.UserID, load.LargestUserIDPrefix), Bytes: bytes}
}

// recordBatchOverhead is the v2 record batch header, which max.message.bytes counts.
const recordBatchOverhead = 61

// batchSizeHook keeps each partition's batch metrics in the order they were read.
type batchSizeHook struct {
	mu      sync.Mutex
	batches map[int32][]kgo.FetchBatchMetrics
}

func (h *batchSizeHook) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, partition int32, m kgo.FetchBatchMetrics) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.batches[partition] = append(h.batches[partition], m)
}

func (h *batchSizeHook) of(partition int32) []kgo.FetchBatchMetrics {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.batches[partition])
}
