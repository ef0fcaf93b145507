package cdc

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// The pipeline behind the stream loop: a few goroutines publish batches, a few others
// mark them published, and the loop meanwhile reads the next batch. Serially (read,
// then publish, then mark, then read again) a drain spends most of each turn in the
// mark, a durable commit of a few hundred row moves, during which nothing is read or
// sent; with one publisher behind the loop, the publisher's round trips (the
// dead-letter lookup, the produce call) are the limit (docs/adr/0003: four publishers,
// four markers).
//
// What stays serial, and why: publishing per aggregate. A batch with an event of an
// aggregate that an earlier batch still being published holds waits for that batch
// (order.go), so that an aggregate's next event is sent only once its previous one is
// acknowledged or dead-lettered, and its dead letters written. Marks touch rows of their own (an event in two batches, a replay published
// twice, is moved by whichever mark locks it first; the other finds nothing), so they
// may run side by side and finish in any order: the loop confirms a batch's end only
// once it and every batch before it are marked (position.marked).
//
// The one exception to serial publishing: the events of a partition that stopped
// answering while the others did. They are parked beside the stream (parking.go) and a
// goroutine of their own, the prober (probe.go), publishes them once the partition
// answers, while the publisher goes on. A batch with parked events is reported marked
// only once they are acknowledged and marked too, so the confirm rule is unchanged.

// markers is how many marks may run at once, each on its own pooled connection, and
// publishers how many batches may be published at once: as many as the polling relay's
// workers, whose batches overlap the same way.
const (
	markers    = 4
	publishers = 4
)

// A handedOff batch is the loop's open batch on its way to the publisher, numbered in
// hand-off order (position.nextBatch), with its gate to close once it is published and
// the gates of the earlier batches it must wait for (order.go).
type handedOff struct {
	n      int
	events []outboxEvent
	gate   *batchGate
	after  []<-chan struct{}
}

// published is a batch the broker has judged: its acknowledged events, to be marked.
type published struct {
	n       int
	acked   []uuid.UUID
	started time.Time
}

// pipeline connects the loop to its goroutines.
type pipeline struct {
	// publish takes the loop's open batch. It is unbuffered on purpose: a send succeeds
	// only when a publisher is free, so a batch that has waited MaxBatchDelay goes at
	// once on a quiet stream, and grows, up to BatchSize, while the publishers are busy.
	publish chan handedOff
	// marked reports each batch marked, by its number. It is closed once every
	// goroutine of the pipeline has ended.
	marked chan int
	// failed carries the errors that ended goroutines: each sends at most one.
	failed chan error
	wg     sync.WaitGroup
}

// startPipeline starts the publishers, the markers and the prober (probe.go). They run
// until ctx ends or the loop closes publish; the markers still mark what the publisher
// got acknowledged before it stopped.
func (r *Relay) startPipeline(ctx context.Context, p delivery.Producer) *pipeline {
	pl := &pipeline{publish: make(chan handedOff), marked: make(chan int), failed: make(chan error, 1+publishers+markers)}
	lot := newParkingLot(r.cfg.MaxParked)
	// done reports a batch all of whose parts are done: its mark, and each of its
	// parked events (parking.go). The loop reads marked until it is closed.
	done := func(n int) { pl.marked <- n }
	// Room for one batch per marker beyond those being marked: the publishers run ahead
	// of slow marks by that much, then wait.
	toMark := make(chan published, markers)
	var publishing sync.WaitGroup
	for range publishers {
		publishing.Go(func() { r.publishAll(ctx, p, lot, toMark, pl) })
	}
	pl.wg.Go(func() {
		publishing.Wait()
		close(toMark)
	})
	for range markers {
		pl.wg.Go(func() { r.markAll(ctx, toMark, lot, done, pl) })
	}
	pl.wg.Go(func() {
		if err := r.probe(ctx, p, lot, done); err != nil {
			pl.failed <- err
		}
	})
	go func() {
		pl.wg.Wait()
		r.metrics.parked.Set(0) // the lot ends with the session (parking.go)
		close(pl.marked)
	}()
	return pl
}

// publishAll publishes handed-off batches one at a time, each once the earlier batches
// it waits for are published (order.go), and passes them on to the markers. It stops
// at its first failed publish without closing that batch's gate: no later batch of its
// aggregates is published, and nothing after it is confirmed (streamed again later).
func (r *Relay) publishAll(ctx context.Context, p delivery.Producer, lot *parkingLot, toMark chan<- published, pl *pipeline) {
	for b := range pl.publish {
		for _, earlier := range b.after {
			select {
			case <-earlier:
			case <-ctx.Done():
				return
			}
		}
		started := time.Now()
		lot.expect(b.n)
		acked, err := r.publish(ctx, p, b.events, lot, b.n)
		if err != nil {
			pl.failed <- err
			return
		}
		close(b.gate.published)
		select {
		case toMark <- published{n: b.n, acked: acked, started: started}:
		case <-ctx.Done():
			return
		}
	}
}

// markAll marks published batches one at a time and reports each whose parked events
// are done too (lot.finish). It stops at its first failed mark: that batch is never
// reported, so the loop never confirms past it.
func (r *Relay) markAll(ctx context.Context, toMark <-chan published, lot *parkingLot, done func(int), pl *pipeline) {
	for b := range toMark {
		if len(b.acked) > 0 {
			// Not cut short by ctx: these events are on the topic, and a row that says
			// so spares a republish after the restart.
			markCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.QueryTimeout)
			err := r.markAcked(markCtx, b.acked)
			cancel()
			if err != nil {
				pl.failed <- err
				return
			}
		}
		r.metrics.shared.ObserveBatch(time.Since(b.started))
		if lot.finish(b.n) {
			done(b.n)
		}
	}
}

// finish stops the pipeline after the loop: no more batches, and every batch the
// markers still report is handed to done. It returns once every goroutine has ended.
func (pl *pipeline) finish(done func(batch int)) {
	close(pl.publish)
	for n := range pl.marked {
		done(n)
	}
}
