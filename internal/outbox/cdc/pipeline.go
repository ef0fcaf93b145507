package cdc

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// The pipeline behind the stream loop: one goroutine publishes batches, a few others
// mark them published, and the loop meanwhile reads the next batch. Serially (read,
// then publish, then mark, then read again) a drain spends most of each turn in the
// mark, a durable commit of a few hundred row moves, during which nothing is read or
// sent; with one marker behind a free-running publisher, the marker is the limit
// (docs/adr/0003: one publisher in stream order, four markers).
//
// What stays serial, and why: publishing. One batch at a time, in stream order, so that
// an aggregate's next event is sent only once its previous one is acknowledged or
// dead-lettered (a batch's dead letters are written before the next batch is looked
// at). Marks touch rows of their own (an event in two batches, a replay published
// twice, is moved by whichever mark locks it first; the other finds nothing), so they
// may run side by side and finish in any order: the loop confirms a batch's end only
// once it and every batch before it are marked (position.marked).
//
// The one exception to serial publishing: the events of a partition that stopped
// answering while the others did. They are parked beside the stream (parking.go) and a
// goroutine of their own, the prober (probe.go), publishes them once the partition
// answers, while the publisher goes on. A batch with parked events is reported marked
// only once they are acknowledged and marked too, so the confirm rule is unchanged.

// markers is how many marks may run at once, each on its own pooled connection: as
// many as the polling relay's workers, whose batches overlap the same way.
const markers = 4

// A handedOff batch is the loop's open batch on its way to the publisher, numbered in
// hand-off order (position.nextBatch).
type handedOff struct {
	n      int
	events []outboxEvent
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
	// only when the publisher is free, so a batch that has waited MaxBatchDelay goes at
	// once on a quiet stream, and grows, up to BatchSize, while the publisher is busy.
	publish chan handedOff
	// marked reports each batch marked, by its number. It is closed once every
	// goroutine of the pipeline has ended.
	marked chan int
	// failed carries the errors that ended goroutines: each sends at most one.
	failed chan error
	wg     sync.WaitGroup
}

// startPipeline starts the publisher, the markers and the prober (probe.go). They run
// until ctx ends or the loop closes publish; the markers still mark what the publisher
// got acknowledged before it stopped.
func (r *Relay) startPipeline(ctx context.Context, p delivery.Producer) *pipeline {
	pl := &pipeline{publish: make(chan handedOff), marked: make(chan int), failed: make(chan error, 2+markers)}
	lot := newParkingLot(r.cfg.MaxParked)
	// done reports a batch all of whose parts are done: its mark, and each of its
	// parked events (parking.go). The loop reads marked until it is closed.
	done := func(n int) { pl.marked <- n }
	// Room for one batch per marker beyond those being marked: the publisher runs ahead
	// of slow marks by that much, then waits.
	toMark := make(chan published, markers)
	pl.wg.Go(func() {
		defer close(toMark)
		for b := range pl.publish {
			started := time.Now()
			lot.expect(b.n)
			acked, err := r.publish(ctx, p, b.events, lot, b.n)
			if err != nil {
				pl.failed <- err // nothing of this batch is confirmed: streamed again later
				return
			}
			select {
			case toMark <- published{n: b.n, acked: acked, started: started}:
			case <-ctx.Done():
				return
			}
		}
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
