package cdc

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/fakebroker"
)

// fakeProducer stands in for the Kafka client where a test needs a partition that does
// not answer while the others do, which a real cluster gives only with a broker cut off
// (the partition-offline chaos scenario). kfake cannot stand in: it answers a produce
// request whole, so it cannot leave one partition of a request unanswered while it
// acknowledges the others. Every record goes to the partition delivery.PartitionsOf
// says (PartitionOf), as with the relay's real client. It keeps a log of what was sent
// and acknowledged, in one sequence, so that a test can check an aggregate's order.
type fakeProducer struct {
	fakebroker.Partitions

	mu  sync.Mutex
	seq int
	// firstSent and firstAcked are, per event id, the sequence number of the first call
	// that carried it and of its first acknowledgement.
	firstSent, firstAcked map[string]int
	acks                  map[string]int // event id → acknowledgements
	lastAck               time.Time
}

func newFakeProducer(partitions int) *fakeProducer {
	return &fakeProducer{Partitions: fakebroker.Partitions{N: partitions}, firstSent: map[string]int{}, firstAcked: map[string]int{}, acks: map[string]int{}}
}

func (p *fakeProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	silent := p.Silent()
	p.mu.Lock()
	hasSilent := false
	for _, r := range rs {
		r.Partition = p.PartitionOf(r.Key)
		hasSilent = hasSilent || (silent != nil && r.Partition == *silent)
		id := eventID(r)
		if _, ok := p.firstSent[id]; !ok {
			p.seq++
			p.firstSent[id] = p.seq
		}
	}
	p.mu.Unlock()
	if hasSilent {
		<-ctx.Done() // a broker that never answers: the call waits for its deadline
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	results := make(kgo.ProduceResults, len(rs))
	for i, r := range rs {
		results[i] = kgo.ProduceResult{Record: r}
		if silent != nil && r.Partition == *silent {
			results[i].Err = ctx.Err()
			continue
		}
		id := eventID(r)
		p.acks[id]++
		p.lastAck = time.Now()
		if _, ok := p.firstAcked[id]; !ok {
			p.seq++
			p.firstAcked[id] = p.seq
		}
	}
	return results
}

// quietFor is how long ago the last record was acknowledged.
func (p *fakeProducer) quietFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Since(p.lastAck)
}

// sentAt and ackedAt return the sequence numbers of event id's first send and first
// acknowledgement (0: never).
func (p *fakeProducer) sentAt(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstSent[id]
}

func (p *fakeProducer) ackedAt(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstAcked[id]
}

func eventID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == event.HeaderID {
			return string(h.Value)
		}
	}
	return ""
}
