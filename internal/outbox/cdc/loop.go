package cdc

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
)

// The stream loop: read messages, gather whole transactions into batches, publish, and
// confirm. The one rule everything here keeps: a position is confirmed only when every
// event before it is acknowledged and marked.

// position tracks what may be confirmed.
type position struct {
	// confirmed is the last position reported to the server.
	confirmed pglogrepl.LSN
	// done is the end of the last transaction whose events are all published (or that
	// had none): the furthest position that may be confirmed.
	done pglogrepl.LSN
	// batchEnd is the end of the last transaction whose events are all in the batch:
	// done becomes it once the batch is published.
	batchEnd pglogrepl.LSN
	// inTransaction: a Begin came and its Commit has not. A keepalive in the middle of
	// a transaction says nothing about the transaction, so it cannot move done.
	inTransaction bool
}

// stream runs one streaming session until ctx ends or the connection fails.
func (r *Relay) stream(ctx context.Context, conn *replicationConn, p producer) error {
	var pos position
	var batch []outboxEvent
	var batchStarted time.Time
	nextStatus := time.Now().Add(r.cfg.StatusInterval)
	keepAlive := func() error {
		// Between the retries of an outage: the server takes the report as a sign of
		// life (wal_sender_timeout), and it confirms nothing new. A report that fails
		// means the server ended the session (a relay frozen past the timeout finds
		// this when it wakes): the retries stop, since the slot may be another relay's
		// by now.
		if err := conn.confirm(ctx, pos.confirmed); err != nil {
			return fmt.Errorf("keepalive: the replication session is over: %w", err)
		}
		return nil
	}
	confirm := func() error {
		if pos.done > pos.confirmed {
			pos.confirmed = pos.done
		}
		nextStatus = time.Now().Add(r.cfg.StatusInterval)
		return conn.confirm(ctx, pos.confirmed)
	}

	for {
		if len(batch) > 0 && (len(batch) >= r.cfg.BatchSize || !time.Now().Before(batchStarted.Add(r.cfg.MaxBatchDelay))) {
			if err := r.publish(ctx, p, batch, keepAlive); err != nil {
				return err // nothing of the batch confirmed: the next session streams it again
			}
			batch = batch[:0]
			pos.done = pos.batchEnd
			if err := confirm(); err != nil {
				return err
			}
		}
		if err := r.publishReplayed(ctx, p, keepAlive); err != nil {
			return err
		}
		if !time.Now().Before(nextStatus) {
			r.Replayed() // also look for replays made through another replica's API
			if err := confirm(); err != nil {
				return err
			}
		}

		deadline := nextStatus
		if len(batch) > 0 {
			deadline = batchStarted.Add(r.cfg.MaxBatchDelay)
		}
		msg, err := conn.receive(ctx, deadline)
		if err != nil {
			return err
		}
		switch {
		case msg.begin:
			pos.inTransaction = true
		case msg.insert != nil:
			if len(batch) == 0 {
				batchStarted = time.Now()
			}
			batch = append(batch, *msg.insert)
		case msg.undecodable != nil:
			r.undecodable(ctx, msg.undecodable)
		case msg.commitEnd != 0:
			pos.inTransaction = false
			pos.batchEnd = msg.commitEnd
			if len(batch) == 0 {
				pos.done = msg.commitEnd // a transaction with no event left to publish
			}
		case msg.idleAt != 0:
			if len(batch) == 0 && !pos.inTransaction && msg.idleAt > pos.done {
				// The server has sent everything before idleAt and nothing is open or
				// unpublished: the slot may move on past WAL that held no outbox insert
				// (other tables, other databases), or it would hold that WAL forever
				// on a quiet outbox.
				pos.done, pos.batchEnd = msg.idleAt, msg.idleAt
			}
			if msg.replyRequested {
				if err := confirm(); err != nil {
					return err
				}
			}
		}
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
	dead, err := r.store.deadLetter(queryCtx, bad.ID, "does not decode from the replication stream: "+bad.Err.Error())
	if err != nil {
		r.logger.Error("dead-letter undecodable row", slog.Any("err", err))
		return
	}
	if dead != nil {
		r.metrics.outbox.CountDeadLettered()
		r.alertDeadLetter(ctx, dead)
	}
}

// publishReplayed publishes the events an operator replayed from the DLQ, if Replayed
// asked for a look since the last one.
func (r *Relay) publishReplayed(ctx context.Context, p producer, keepAlive func() error) error {
	select {
	case <-r.replayed:
	default:
		return nil
	}
	queryCtx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	events, err := r.store.pendingAt(queryCtx, "", true)
	if err != nil || len(events) == 0 {
		return err
	}
	r.logger.Info("publishing replayed events", slog.Int("events", len(events)))
	return r.publish(ctx, p, events, keepAlive)
}
