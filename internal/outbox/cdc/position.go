package cdc

import "github.com/jackc/pglogrepl"

// position decides how far the slot may be confirmed while batches are in flight. The
// stream loop reads the next events while earlier batches are being published and
// marked (pipeline.go), so "read", "handed off" and "marked" are three different
// places in the stream. The one rule: done, the furthest position that may be
// confirmed, is the end of a transaction all of whose events are acknowledged and
// marked (or dead-lettered).
//
// position is pure bookkeeping: the loop calls it for every message and every finished
// batch, and reads done.
type position struct {
	// done is the furthest position that may be confirmed.
	done pglogrepl.LSN
	// seen is the end of the last transaction whose events have all been read: those
	// events are in the open batch, in flight, or finished.
	seen pglogrepl.LSN
	// open is how many events have been read and not yet handed off (the open batch).
	open int
	// inFlight holds the batches handed off and not yet confirmable, oldest first:
	// done becomes a batch's end once it and every batch before it are marked. Batches
	// are marked in parallel, so a later one may be marked first.
	inFlight []inFlightBatch
	// finished counts the batches that left inFlight: batch n (numbered from 0 in
	// hand-off order) is inFlight[n-finished].
	finished int
	// inTransaction: a Begin came and its Commit has not. A keepalive in the middle of
	// a transaction says nothing about the transaction, so it cannot move done.
	inTransaction bool
}

type inFlightBatch struct {
	end    pglogrepl.LSN
	marked bool
}

// idle reports whether every event read so far is finished: nothing open, nothing in
// flight.
func (p *position) idle() bool { return p.open == 0 && len(p.inFlight) == 0 }

func (p *position) begin() { p.inTransaction = true }

// read counts n events added to the open batch.
func (p *position) read(n int) { p.open += n }

// commit records the end of a transaction whose events have all been read. With
// nothing open or in flight, the transaction is done at once (it had no event to
// publish, or none left).
func (p *position) commit(end pglogrepl.LSN) {
	p.inTransaction = false
	p.seen = end
	if p.idle() {
		p.done = end
	}
}

// nextBatch is the number the open batch gets when it is handed off.
func (p *position) nextBatch() int { return p.finished + len(p.inFlight) }

// handOff records that the open batch went to the pipeline. Its end is the last
// transaction read completely: a transaction cut across batches (larger than a batch)
// ends in a later one, and is confirmed only with it.
func (p *position) handOff() {
	p.inFlight = append(p.inFlight, inFlightBatch{end: p.seen})
	p.open = 0
}

// marked records that batch n is marked. done moves only over the oldest batches, as
// far as they are all marked.
func (p *position) marked(n int) {
	p.inFlight[n-p.finished].marked = true
	for len(p.inFlight) > 0 && p.inFlight[0].marked {
		p.done = p.inFlight[0].end
		p.inFlight = p.inFlight[1:]
		p.finished++
	}
	if p.idle() {
		p.done = p.seen // transactions with no event, committed meanwhile
	}
}

// keepalive records that the server has sent everything before at. When nothing is
// open, in flight or in the middle of a transaction, the slot may move on past WAL that
// held no outbox insert (other tables, other databases), or it would hold that WAL for
// ever on a quiet outbox.
func (p *position) keepalive(at pglogrepl.LSN) {
	if p.idle() && !p.inTransaction && at > p.done {
		p.done, p.seen = at, at
	}
}
