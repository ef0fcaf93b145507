package load

import (
	"context"
	"fmt"
	"net/http"
	"sync"
)

// The load sends a share of its payments (Config.SameKeyEvery) from several clients
// at once, each with the payment's one Idempotency-Key: its creation, and with the
// lifecycle each of its plan's transitions. A key is otherwise reused only by a retry
// sent after the previous attempt was answered, so a service that checks the key
// outside its write transaction would pass every other row while two requests in flight
// with one key create two payments. The service may answer the copies that lose 409 (in
// flight, to be retried) or replay the winner's answer, as the IETF Idempotency-Key
// draft allows; a second payment, or a second transition, is the bug.
//
// Only the first copy counts in the load's totals, so that the other rows see the same
// payments and transitions as without copies.

// SameKeyCopies is how many clients send a same-key request at once.
const SameKeyCopies = 3

// SameKeyStats is what the clients saw of the concurrent same-key requests.
type SameKeyStats struct {
	// Keys counts the keys sent by several clients at once, creations and transitions;
	// Split those whose successful answers named more than one payment (or event).
	Keys  int `json:"keys"`
	Split int `json:"split"`
	// FirstSplit describes the first split key: the key and the ids its answers named.
	FirstSplit string `json:"first_split,omitempty"`
}

func (s *SameKeyStats) add(o SameKeyStats) {
	s.Keys += o.Keys
	s.Split += o.Split
	if s.FirstSplit == "" {
		s.FirstSplit = o.FirstSplit
	}
}

// sameKey records one key sent by several clients: ids are the payment (or event) ids
// of their successful answers.
func (s *SameKeyStats) sameKey(key string, ids []string) {
	s.Keys++
	distinct := map[string]bool{}
	for _, id := range ids {
		if id != "" {
			distinct[id] = true
		}
	}
	if len(distinct) > 1 {
		s.Split++
		if s.FirstSplit == "" {
			s.FirstSplit = fmt.Sprintf("key %s answered with %d ids %v", key, len(distinct), ids)
		}
	}
}

// sameKeyLoad reports whether payment n is sent by several clients at once.
func sameKeyLoad(cfg Config, n int) bool {
	return cfg.SameKeyEvery > 0 && n%cfg.SameKeyEvery == cfg.SameKeyEvery/2 && !largest(cfg, n)
}

// atOnce runs f(0) ... f(copies-1) each on its own goroutine, released together by a
// barrier once every goroutine has started, and waits for them all.
func atOnce(copies int, f func(sender int)) {
	var started, done sync.WaitGroup
	started.Add(copies)
	for i := range copies {
		done.Go(func() {
			started.Done()
			started.Wait()
			f(i)
		})
	}
	done.Wait()
}

// sendPaymentCopies sends payment n from SameKeyCopies clients at once and returns the
// outcome that counts (the first accepted one, else the first) and what the copies saw.
func sendPaymentCopies(ctx context.Context, client *http.Client, cfg Config, n int) (outcome, SameKeyStats) {
	outs := make([]outcome, SameKeyCopies)
	atOnce(SameKeyCopies, func(sender int) { outs[sender] = sendPayment(ctx, client, cfg, n, sender) })
	var ids []string
	var attempts []Attempt
	counted := outs[0]
	for _, o := range outs {
		if o.rejected == "" {
			ids = append(ids, o.paymentID)
		}
		attempts = append(attempts, o.attempts...)
	}
	for _, o := range outs {
		if counted.rejected != "" && o.rejected == "" {
			counted = o
		}
	}
	counted.attempts = attempts
	var stats SameKeyStats
	stats.sameKey(fmt.Sprintf("%s-%d", cfg.RunID, n), ids)
	return counted, stats
}
