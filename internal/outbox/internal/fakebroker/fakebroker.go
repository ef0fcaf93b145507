// Package fakebroker holds what the relays' hand-written fake producers share: the
// metadata of a topic of a few partitions, the partition each record goes to (the one
// the relays' real clients put it in), and a partition that can be made silent. Only
// tests import it; each relay's fake says why kfake cannot stand in for it.
package fakebroker

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// Partitions is a topic's partitions as a fake producer answers for them. The zero
// value is one partition, all answering. Safe for concurrent use.
type Partitions struct {
	// N is how many partitions the topic has (0: 1).
	N int

	mu sync.Mutex
	// silent, when set, is the partition whose records get no answer, as when its
	// leader is cut off from the relay: they fail only when the call's context ends,
	// and the call returns only then, while the other records are written.
	silent *int32
}

// RequestCachedMetadata answers with the topic of each request and its partitions.
func (p *Partitions) RequestCachedMetadata(_ context.Context, req *kmsg.MetadataRequest, _ time.Duration) (*kmsg.MetadataResponse, error) {
	resp := kmsg.NewPtrMetadataResponse()
	for _, rt := range req.Topics {
		t := kmsg.NewMetadataResponseTopic()
		t.Topic = rt.Topic
		for i := range max(p.N, 1) {
			part := kmsg.NewMetadataResponseTopicPartition()
			part.Partition = int32(i)
			t.Partitions = append(t.Partitions, part)
		}
		resp.Topics = append(resp.Topics, t)
	}
	return resp, nil
}

// PartitionOf is the partition the relay's client puts a record with this key in,
// among the fake's partitions: delivery.PartitionsOf, which both relays use, with the
// partition count the fake's metadata answers.
func (p *Partitions) PartitionOf(key []byte) int32 {
	r := &kgo.Record{Topic: "any", Key: key}
	return delivery.PartitionsOf(context.Background(), p, r.Topic, []*kgo.Record{r})[r]
}

// SetSilent makes partition part stop answering, or, with nil, answer again.
func (p *Partitions) SetSilent(part *int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.silent = part
}

// Silent is the partition that does not answer, nil when every one does.
func (p *Partitions) Silent() *int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.silent
}
