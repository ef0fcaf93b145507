package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// fakeProducer stands in for the Kafka client where a test needs an exact broker
// error, or a broker that answers slowly. Like a broker judging one batch, it fails
// every record of a ProduceSync call when reject returns an error for any of them.
type fakeProducer struct {
	// delay is how long each call takes, unless its context ends first.
	delay time.Duration
	// reject returns the broker's verdict on one record: nil accepts it.
	reject func(*kgo.Record) error
	// partitionDown, when set, fails the records it returns an error for and only
	// those, as a broker fails the records of one unavailable partition while the
	// other partitions of the same call are written.
	partitionDown func(*kgo.Record) error

	mu          sync.Mutex
	acked       map[string]int // event id → how often the record was acknowledged
	calls       int
	inFlight    int
	maxInFlight int // the most calls that overlapped
	maxRecords  int // the most records one call carried
}

func (p *fakeProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	p.mu.Lock()
	p.calls++
	p.inFlight++
	p.maxInFlight = max(p.maxInFlight, p.inFlight)
	p.maxRecords = max(p.maxRecords, len(rs))
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
	}()

	var verdict error
	if p.delay > 0 {
		timer := time.NewTimer(p.delay)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			verdict = ctx.Err()
		case <-timer.C:
		}
	}
	for _, r := range rs {
		if verdict == nil && p.reject != nil {
			verdict = p.reject(r)
		}
	}
	results := make(kgo.ProduceResults, len(rs))
	p.mu.Lock()
	defer p.mu.Unlock()
	partitionDown := p.partitionDown
	for i, r := range rs {
		err := verdict
		if err == nil && partitionDown != nil {
			err = partitionDown(r)
		}
		results[i] = kgo.ProduceResult{Record: r, Err: err}
		if err == nil {
			if p.acked == nil {
				p.acked = map[string]int{}
			}
			p.acked[header(r, event.HeaderID)]++
		}
	}
	return results
}

// setPartitionDown replaces partitionDown while the producer is in use.
func (p *fakeProducer) setPartitionDown(fn func(*kgo.Record) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partitionDown = fn
}

// ackCount returns how often the record of event id was acknowledged.
func (p *fakeProducer) ackCount(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked[id]
}

// rejectIDs returns a reject function that refuses the records of the given events
// with err and accepts every other record.
func rejectIDs(err error, ids ...string) func(*kgo.Record) error {
	poison := map[string]bool{}
	for _, id := range ids {
		poison[id] = true
	}
	return func(r *kgo.Record) error {
		if poison[header(r, event.HeaderID)] {
			return err
		}
		return nil
	}
}
