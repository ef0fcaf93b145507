package cdc

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/delivery"
)

// The stream loop: take the receiver's messages, gather whole transactions into the
// open batch, hand it to the pipeline once it is full or has waited MaxBatchDelay and
// the publisher is free, and let the slot be confirmed as batches finish. The one rule
// everything here keeps: a position is confirmed only when every event before it is
// acknowledged and marked (position.go).

// stream runs one streaming session until ctx ends or something fails. Three goroutines
// work on it: the receiver reads (receiver.go), the publisher and the markers follow
// (pipeline.go), and this loop, which alone holds the batch and the position, ties
// them together.
func (r *Relay) stream(ctx context.Context, conn *replicationConn, p delivery.Producer) error {
	ctx, cancel := context.WithCancel(ctx)
	rc := newReceiver(conn, r.cfg.StatusInterval)
	received := make(chan error, 1)
	receiverDone := make(chan struct{})
	go func() {
		defer close(receiverDone)
		received <- rc.run(ctx)
	}()
	pl := r.startPipeline(ctx, p)

	var pos position
	defer func() {
		// Stop reading and publishing; take what the markers still finish; then, with
		// the connection the receiver no longer uses, confirm it and end the stream, so
		// that a clean stop leaves nothing marked to stream again. Errors are dropped:
		// the stream is ending, and the next session starts from the slot either way.
		cancel()
		<-receiverDone
		pl.finish(pos.marked)
		if conn.conn.IsClosed() {
			// The connection broke (a server that crashed or was promoted away): pgconn
			// is already closing it from a goroutine of its own, and nothing more may
			// be sent on it. The slot keeps its last confirmed position.
			return
		}
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.QueryTimeout)
		defer cancel()
		if pos.done > 0 {
			_ = conn.confirm(endCtx, pos.done)
		}
		_ = conn.stop(endCtx)
	}()

	var batch []outboxEvent
	order := newBatchOrder() // which earlier batches each batch waits for (order.go)
	// due fires MaxBatchDelay after the open batch's first event; ripe is set then.
	var due <-chan time.Time
	ripe := false
	replayCheck := time.NewTicker(r.cfg.StatusInterval)
	defer replayCheck.Stop()
	reconcileCheck := time.NewTicker(r.cfg.ReconcileInterval)
	defer reconcileCheck.Stop()
	var watch *reconcileWatch // the reconcile pass's noted look (reconcile.go)
	for {
		// A full batch waits for the publisher, and the stream waits with it: not
		// reading is what holds the walsender back.
		msgs := rc.msgs
		if len(batch) >= r.cfg.BatchSize {
			msgs = nil
		}
		var handOff chan<- handedOff // nil, never ready, while there is nothing to send
		var next handedOff
		if len(batch) >= r.cfg.BatchSize || (len(batch) > 0 && ripe) {
			handOff = pl.publish
			gate, after := order.next()
			next = handedOff{n: pos.nextBatch(), events: batch, gate: gate, after: after}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-received:
			return err
		case err := <-pl.failed:
			return err // nothing after the last marked batch is confirmed: the next session streams it again
		case handOff <- next:
			order.handOff(next.n)
			pos.handOff()
			batch = nil // the publisher owns the old one now
			due, ripe = nil, false
		case <-due:
			ripe = true
		case n := <-pl.marked:
			pos.marked(n)
			order.marked(n)
		case <-replayCheck.C:
			r.Replayed() // also look for replays made through another replica's API
		case <-r.replayed:
			replayed, err := r.replayedEvents(ctx)
			if err != nil {
				return err
			}
			// Ahead of the open batch: a replayed event is older than anything its
			// aggregate has in the stream.
			batch = append(replayed, batch...)
			order.addAll(replayed)
			ripe = true
			pos.read(len(replayed))
		case <-reconcileCheck.C:
			missed, next, err := r.reconcile(ctx, watch)
			if err != nil && ctx.Err() == nil {
				r.logger.Warn("reconcile pending rows", slog.Any("err", err)) // tried again at the next tick
			}
			watch = next
			if len(missed) > 0 {
				// Ahead of the open batch, as replays: they are older than the stream.
				batch = append(missed, batch...)
				order.addAll(missed)
				ripe = true
				pos.read(len(missed))
			}
		case msg := <-msgs:
			switch {
			case msg.begin:
				pos.begin()
			case msg.insert != nil:
				if len(batch) == 0 {
					due = time.After(r.cfg.MaxBatchDelay)
				}
				batch = append(batch, *msg.insert)
				order.add(*msg.insert)
				pos.read(1)
			case msg.undecodable != nil:
				r.undecodable(ctx, msg.undecodable)
			case msg.commitEnd != 0:
				pos.commit(msg.commitEnd)
			case msg.idleAt != 0:
				pos.keepalive(msg.idleAt)
			}
		}
		rc.allow(pos.done)
	}
}

// undecodable handles an inserted row the relay cannot turn into an event. It cannot
// hold the stream (it would never decode), so it goes to the DLQ when its id is known,
// and is logged at Error level either way: someone changed the table under the relay.
func (r *Relay) undecodable(ctx context.Context, bad *decodeError) {
	r.logger.Error("outbox row from the stream does not decode; skipping it",
		slog.String("event_id", bad.ID.String()), slog.Any("err", bad.Err))
	if bad.ID == uuid.Nil {
		return
	}
	queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	if _, err := r.deadLetter(queryCtx, bad.ID, "does not decode from the replication stream: "+bad.Err.Error()); err != nil {
		r.logger.Error("dead-letter undecodable row", slog.Any("err", err))
	}
}

// replayedEvents reads the events an operator replayed from the DLQ. A replay made
// while the previous one is still in flight may be published twice: at least once.
func (r *Relay) replayedEvents(ctx context.Context) ([]outboxEvent, error) {
	queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	events, err := r.store.pendingAt(queryCtx, "", true)
	if err != nil {
		return nil, err
	}
	if len(events) > 0 {
		r.logger.Info("publishing replayed events", slog.Int("events", len(events)))
	}
	return events, nil
}
