package cdc

import (
	"fmt"
	"testing"

	"github.com/jackc/pglogrepl"
)

// The confirm rule with batches in flight: done, the furthest position the slot may be
// confirmed to, never passes an event that is read, handed off or published but not
// yet marked. Each case is a sequence of stream messages and pipeline reports, with
// the done expected after each step.
func TestPositionConfirmsOnlyMarkedWork(t *testing.T) {
	t.Parallel()
	type step struct {
		do   string // begin, insert, commit N, handoff, marked B (batch B, numbered from 0 in hand-off order), keepalive N
		done pglogrepl.LSN
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"one transaction, published and marked", []step{
			{"begin", 0}, {"insert", 0}, {"commit 10", 0},
			{"handoff", 0}, {"marked 0", 10},
		}},
		{"the next batch is read while the previous one is in flight", []step{
			{"begin", 0}, {"insert", 0}, {"commit 10", 0}, {"handoff", 0},
			{"begin", 0}, {"insert", 0}, {"commit 20", 0}, // read, not handed off
			{"marked 0", 10}, // only the first batch's end
			{"handoff", 10}, {"marked 1", 20},
		}},
		{"a later batch marked first confirms nothing", []step{
			{"begin", 0}, {"insert", 0}, {"commit 10", 0}, {"handoff", 0},
			{"begin", 0}, {"insert", 0}, {"commit 20", 0}, {"handoff", 0},
			{"begin", 0}, {"insert", 0}, {"commit 30", 0}, {"handoff", 0},
			{"marked 2", 0}, {"marked 1", 0}, // batch 0 still in flight
			{"marked 0", 30},
		}},
		{"out of order, done moves as far as the oldest are marked", []step{
			{"begin", 0}, {"insert", 0}, {"commit 10", 0}, {"handoff", 0},
			{"begin", 0}, {"insert", 0}, {"commit 20", 0}, {"handoff", 0},
			{"begin", 0}, {"insert", 0}, {"commit 30", 0}, {"handoff", 0},
			{"marked 0", 10}, {"marked 2", 10}, {"marked 1", 30},
		}},
		{"a transaction with no event waits for the batches in flight", []step{
			{"begin", 0}, {"insert", 0}, {"commit 10", 0}, {"handoff", 0},
			{"begin", 0}, {"commit 15", 0}, // nothing of ours in it, but 10 is not marked
			{"marked 0", 15},
		}},
		{"a transaction with no event on an idle stream is done at once", []step{
			{"begin", 0}, {"commit 15", 15},
		}},
		{"a transaction larger than a batch is confirmed at its commit only", []step{
			{"begin", 0}, {"commit 5", 5},
			{"begin", 5}, {"insert", 5}, {"insert", 5}, {"handoff", 5}, // full batch, transaction still open
			{"insert", 5}, {"marked 0", 5}, // the first half is marked: still 5
			{"commit 30", 5}, {"handoff", 5}, {"marked 1", 30},
		}},
		{"a keepalive moves an idle slot", []step{
			{"keepalive 40", 40},
		}},
		{"a keepalive moves nothing with a batch in flight", []step{
			{"begin", 0}, {"insert", 0}, {"commit 10", 0}, {"handoff", 0},
			{"keepalive 40", 0}, {"marked 0", 10},
		}},
		{"a keepalive moves nothing with events read", []step{
			{"begin", 0}, {"insert", 0}, {"commit 10", 0},
			{"keepalive 40", 0},
		}},
		{"a keepalive moves nothing inside a transaction", []step{
			{"begin", 0}, {"keepalive 40", 0}, {"insert", 0}, {"commit 50", 0},
			{"handoff", 0}, {"marked 0", 50},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var pos position
			handedOff := 0
			for i, s := range c.steps {
				var n uint64
				switch {
				case s.do == "begin":
					pos.begin()
				case s.do == "insert":
					pos.read(1)
				case s.do == "handoff":
					if got, want := pos.nextBatch(), handedOff; got != want {
						t.Fatalf("step %d: next batch is numbered %d, want %d", i, got, want)
					}
					pos.handOff()
					handedOff++
				case scan(s.do, "commit %d", &n):
					pos.commit(pglogrepl.LSN(n))
				case scan(s.do, "marked %d", &n):
					pos.marked(int(n))
				case scan(s.do, "keepalive %d", &n):
					pos.keepalive(pglogrepl.LSN(n))
				default:
					t.Fatalf("step %d: unknown %q", i, s.do)
				}
				if pos.done != s.done {
					t.Fatalf("after step %d (%s): done = %d, want %d", i, s.do, pos.done, s.done)
				}
			}
		})
	}
}

func scan(s, format string, n *uint64) bool {
	_, err := fmt.Sscanf(s, format, n)
	return err == nil
}
