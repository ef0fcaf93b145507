package cdc

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
)

// receiver reads the replication stream on a goroutine of its own, so that the stream
// loop can hand batches off and take finished ones while the next messages are read
// and decoded. While streaming it is the only user of the connection: it also sends
// the status updates, with whatever position the loop last said may be confirmed.
type receiver struct {
	conn *replicationConn
	// msgs carries every message that says something (inserts, begins, commits,
	// keepalives) to the loop, in stream order.
	msgs chan streamMessage
	// confirmable is the furthest position the loop allows to be confirmed
	// (position.done), as a number.
	confirmable atomic.Uint64
	// statusInterval: a status update goes out at least this often, even when the loop
	// holds the messages back (a full batch waiting on a Kafka outage), because the
	// server takes it as the sign of life that keeps the walsender (wal_sender_timeout).
	statusInterval time.Duration
}

func newReceiver(conn *replicationConn, statusInterval time.Duration) *receiver {
	// A small buffer lets the receiver decode a few messages ahead of the loop; the loop
	// holds it back by not reading when its batch is full.
	return &receiver{conn: conn, msgs: make(chan streamMessage, 64), statusInterval: statusInterval}
}

// allow lets the receiver confirm up to pos at its next status update.
func (rc *receiver) allow(pos pglogrepl.LSN) { rc.confirmable.Store(uint64(pos)) }

// run receives until ctx ends or the connection fails. It confirms a newly allowed
// position when it next wakes (a message, or the status interval on a quiet stream),
// and answers the server's requests for a reply at once.
func (rc *receiver) run(ctx context.Context) error {
	s := statusSender{rc: rc, next: time.Now().Add(rc.statusInterval)}
	for {
		if pglogrepl.LSN(rc.confirmable.Load()) > s.confirmed || !time.Now().Before(s.next) {
			if err := s.report(ctx); err != nil {
				return err
			}
		}
		msg, err := rc.conn.receive(ctx, s.next)
		if err != nil {
			return err
		}
		if msg.replyRequested {
			if err := s.report(ctx); err != nil {
				return err
			}
		}
		if msg == (streamMessage{}) {
			continue // the deadline passed, or a message with nothing for the loop
		}
		if err := rc.deliver(ctx, msg, &s); err != nil {
			return err
		}
	}
}

// deliver hands msg to the loop, sending the status updates that fall due while the
// loop holds it back.
func (rc *receiver) deliver(ctx context.Context, msg streamMessage, s *statusSender) error {
	select {
	case rc.msgs <- msg:
		return nil
	default:
	}
	for {
		timer := time.NewTimer(time.Until(s.next))
		select {
		case rc.msgs <- msg:
			timer.Stop()
			return nil
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
			if err := s.report(ctx); err != nil {
				return err
			}
		}
	}
}

// statusSender is the receiver's side of the status updates.
type statusSender struct {
	rc *receiver
	// confirmed is the last position reported to the server; it never goes back.
	confirmed pglogrepl.LSN
	// next is when the next update is due at the latest.
	next time.Time
}

func (s *statusSender) report(ctx context.Context) error {
	s.confirmed = max(s.confirmed, pglogrepl.LSN(s.rc.confirmable.Load()))
	s.next = time.Now().Add(s.rc.statusInterval)
	return s.rc.conn.confirm(ctx, s.confirmed)
}
