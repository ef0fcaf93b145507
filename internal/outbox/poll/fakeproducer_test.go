package poll

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/outbox/internal/fakebroker"
)

// fakeProducer stands in for the Kafka client where kfake cannot serve (each test says
// why): one partition silent while the others answer, a partition that fails fast, a
// delay on every call, or counts per client. Like a broker judging one batch, it
// fails every record of a ProduceSync call when reject returns an error for any of
// them.
type fakeProducer struct {
	fakebroker.Partitions

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
	ackOrder    []string       // event ids, in the order of their acknowledgements
	calls       int
	inFlight    int
	maxInFlight int // the most calls that overlapped
	maxRecords  int // the most records one call carried
	silentCalls []silentCall
}

// silentCall is a call that carried a record of the silent partition: when it started
// and ended, and whether it carried records of other partitions too, which the broker
// acknowledged.
type silentCall struct {
	start, end time.Time
	mixed      bool
}

func (p *fakeProducer) ProduceSync(ctx context.Context, rs ...*kgo.Record) kgo.ProduceResults {
	p.mu.Lock()
	p.calls++
	p.inFlight++
	p.maxInFlight = max(p.maxInFlight, p.inFlight)
	p.maxRecords = max(p.maxRecords, len(rs))
	p.mu.Unlock()
	silentPartition := p.Silent()
	defer func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
	}()

	silent, mixed := false, false
	for _, r := range rs {
		r.Partition = p.PartitionOf(r.Key)
		isSilent := silentPartition != nil && r.Partition == *silentPartition
		silent, mixed = silent || isSilent, mixed || !isSilent
	}
	if silent {
		started := time.Now()
		<-ctx.Done()
		p.mu.Lock()
		p.silentCalls = append(p.silentCalls, silentCall{start: started, end: time.Now(), mixed: mixed})
		p.mu.Unlock()
	}

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
		if err == nil && silentPartition != nil && r.Partition == *silentPartition {
			err = ctx.Err()
		}
		results[i] = kgo.ProduceResult{Record: r, Err: err}
		if err == nil {
			if p.acked == nil {
				p.acked = map[string]int{}
			}
			p.acked[header(r, event.HeaderID)]++
			p.ackOrder = append(p.ackOrder, header(r, event.HeaderID))
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

// overlappingSilentCalls counts the calls to the silent partition that started while
// another was waiting, among those that started once the relay could know that the
// partition does not answer: after the first call that failed for it while the broker
// acknowledged its other records, and grace more, the time its worker takes to judge
// that call (slow under -race). Calls already waiting then are left out.
func (p *fakeProducer) overlappingSilentCalls(grace time.Duration) (overlapping, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var known time.Time // calls are appended as they end
	for _, c := range p.silentCalls {
		if c.mixed {
			known = c.end.Add(grace)
			break
		}
	}
	if known.IsZero() {
		return 0, 0
	}
	var after []silentCall
	for _, c := range p.silentCalls {
		if c.start.After(known) {
			after = append(after, c)
		}
	}
	for i, c := range after {
		for j, other := range after {
			if i != j && other.start.Before(c.start) && other.end.After(c.start) {
				overlapping++
				break
			}
		}
	}
	return overlapping, len(after)
}

// firstAcks returns, for each event id acknowledged, the position of its first
// acknowledgement among all of them: the order in which the broker wrote the events.
func (p *fakeProducer) firstAcks() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := make(map[string]int, len(p.ackOrder))
	for i, id := range p.ackOrder {
		if _, seen := first[id]; !seen {
			first[id] = i
		}
	}
	return first
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
