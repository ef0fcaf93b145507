package cdc

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/backoff"
)

// When one partition stops answering while the others are healthy (its leader is cut off
// from this relay), each of its records fails only after PublishTimeout, and the serial
// publisher, which waits for every event of a batch, would hold the whole stream until
// the partition answers again, and the other partitions would keep next to none of their
// rate (the partition-offline chaos scenario measures it). So the events of such a
// partition are parked: they leave the publisher and wait beside the stream, in the
// parking lot, while the publisher goes on with the next batches. The prober (probe.go)
// sends them once the partition breaker (delivery.PartitionBreaker, the polling relay's)
// lets their partition be probed, and after that as fast as the partition takes them.
//
// What parking keeps:
//
//   - Order per aggregate. An event is parked behind every parked event of its
//     aggregate (all of them on one partition, since the key is the aggregate id), and
//     the prober sends only the first parked event of each aggregate, the next one only
//     once it is acknowledged or dead-lettered. Only the publisher parks, so an
//     aggregate with nothing parked has nothing of its own waiting anywhere.
//   - The slot. A batch with parked events is not marked (position.marked) until they
//     are all acknowledged and marked, or dead-lettered: waiting tracks that. The
//     confirmed position stays behind the oldest parked event while later batches are
//     published and marked, so the WAL the slot holds grows for as long as the partition
//     is down (outbox_cdc_wal_retained_bytes), and a crash republishes everything after
//     it: duplicates, which consumers drop by X-Event-Id, never a gap.
//   - Memory. The lot holds at most Config.MaxParked events. When it is full the
//     publisher waits for room, and the stream waits with it: the behaviour without the
//     lot. The position's list of batches in flight grows with the batches published
//     meanwhile, a few bytes each.
//
// The lot lives in one streaming session. When the session ends (a restart, a lost
// connection), its parked events are dropped with it: nothing past them was
// confirmed, so the next session streams them again from the slot.

// A parkedEvent is an event waiting in the lot.
type parkedEvent struct {
	outboxEvent
	// batch is the number of the batch it came in (position.nextBatch).
	batch int
	// partition is where the event goes, -1 when unknown.
	partition int32
	// notBefore is when the prober may send it again after a failure of its own (a
	// rejection, or a transport failure of a partition that is not open).
	notBefore time.Time
	// noted: its row says already why it waits (last_error).
	noted bool
	// failures counts the prober's failed sends of it that its breaker did not time.
	failures int
}

// parkingLot is the bounded side queue of parked events, shared by the publisher, which
// parks, and the prober, which sends and unparks. It also tracks which batches wait
// on it.
type parkingLot struct {
	// room holds a token per parked event: parking waits for room while it is full.
	room chan struct{}

	mu sync.Mutex
	// byAggregate holds each aggregate's parked events in stream order.
	byAggregate map[string][]*parkedEvent
	// aggregates are the aggregates of byAggregate in the order they were parked first,
	// so that the oldest parked events are sent first.
	aggregates []string
	// waiting counts, per batch not yet marked, its parts still to finish: its mark
	// (markers) and each of its parked events.
	waiting map[int]int

	// lastFailedPark is when a publisher last parked the events of a failed call
	// (publish.go, parkFailed).
	lastFailedPark time.Time
}

func newParkingLot(maxParked int) *parkingLot {
	return &parkingLot{room: make(chan struct{}, maxParked), byAggregate: map[string][]*parkedEvent{}, waiting: map[int]int{}}
}

// expect records that batch n is handed to the publisher: it waits for its mark.
func (l *parkingLot) expect(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting[n]++
}

// finish records that one part of batch n is done (its mark, or one of its parked
// events acknowledged and marked, or dead-lettered), and reports whether the whole
// batch is now done.
func (l *parkingLot) finish(n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting[n]--
	if l.waiting[n] > 0 {
		return false
	}
	delete(l.waiting, n)
	return true
}

// failedParkAt returns when a publisher last parked the events of a failed call, and
// notes now as the next such moment when note is set.
func (l *parkingLot) failedParkAt(note bool) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.lastFailedPark
	if note {
		l.lastFailedPark = time.Now()
	}
	return last
}

// holds reports whether aggregate has parked events: its next ones must park behind.
func (l *parkingLot) holds(aggregate string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byAggregate[aggregate]) > 0
}

// park adds e, of batch n, behind the parked events of its aggregate, waiting for room
// while the lot is full. noted says whether its row records already why it waits.
func (l *parkingLot) park(ctx context.Context, e outboxEvent, n int, partition int32, noted bool) error {
	select {
	case l.room <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.byAggregate[e.AggregateID]) == 0 {
		l.aggregates = append(l.aggregates, e.AggregateID)
	}
	l.byAggregate[e.AggregateID] = append(l.byAggregate[e.AggregateID], &parkedEvent{outboxEvent: e, batch: n, partition: partition, noted: noted})
	l.waiting[n]++
	return nil
}

// heads returns the first parked event of each aggregate, at most limit of them, oldest
// first, leaving out those that wait out a failure of their own.
func (l *parkingLot) heads(now time.Time, limit int) []*parkedEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*parkedEvent
	for _, agg := range l.aggregates {
		if len(out) == limit {
			break
		}
		if head := l.byAggregate[agg][0]; !now.Before(head.notBefore) {
			out = append(out, head)
		}
	}
	return out
}

// unnoted returns the parked events whose rows do not say yet why they wait, and counts
// them as noted.
func (l *parkingLot) unnoted() []*parkedEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*parkedEvent
	for _, agg := range l.aggregates {
		for _, e := range l.byAggregate[agg] {
			if !e.noted {
				e.noted = true
				out = append(out, e)
			}
		}
	}
	return out
}

// backOff makes the prober leave e alone for base doubled per failure of e so far,
// capped at max.
func (l *parkingLot) backOff(e *parkedEvent, base, max time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.failures++
	e.notBefore = time.Now().Add(backoff.Delay(base, max, e.failures-1))
}

// leave removes e, the first parked event of its aggregate, once it is acknowledged
// and marked or dead-lettered, and reports whether its batch is now done.
func (l *parkingLot) leave(e *parkedEvent) bool {
	l.mu.Lock()
	queue := l.byAggregate[e.AggregateID]
	if len(queue) == 0 || queue[0] != e {
		l.mu.Unlock()
		return false // not parked (cannot happen: only the prober unparks, heads only)
	}
	if queue = queue[1:]; len(queue) > 0 {
		l.byAggregate[e.AggregateID] = queue
	} else {
		delete(l.byAggregate, e.AggregateID)
		for i, agg := range l.aggregates {
			if agg == e.AggregateID {
				l.aggregates = append(l.aggregates[:i], l.aggregates[i+1:]...)
				break
			}
		}
	}
	l.mu.Unlock()
	<-l.room
	return l.finish(e.batch)
}

// size is how many events are parked, for the metric.
func (l *parkingLot) size() int { return len(l.room) }

func parkedIDs(events []*parkedEvent) []uuid.UUID {
	out := make([]uuid.UUID, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}
