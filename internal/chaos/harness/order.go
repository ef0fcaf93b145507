package harness

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
)

// fillOrder counts the payments whose events the topic shows out of their sequence, the
// committed transitions without an event and the events of transitions never committed,
// and the consumer's applied order.
func fillOrder(o verify.Observed, r *verdict.Report) {
	r.OrderViolations, r.TransitionsLost, r.TransitionsPhantom, r.MultiEventPayments = 0, 0, 0, 0
	for _, id := range slices.Sorted(maps.Keys(o.Topic.PaymentOrder)) {
		events := o.Topic.PaymentOrder[id]
		if len(events) > 1 {
			r.MultiEventPayments++
		}
		if i := outOfSequence(sequencesOf(events)); i > 0 {
			r.OrderViolations++
			if r.OrderViolations == 1 {
				r.Notes = append(r.Notes, fmt.Sprintf("order_violations: payment %s's events by first occurrence: %s; %s at partition %d offset %d came after a later one",
					id, describe(events), events[i].Type, events[i].Partition, events[i].Offset))
			}
		}
	}
	if o.Lifecycles == nil {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(o.Lifecycles)) {
		l := o.Lifecycles[id]
		inTopic := o.Topic.TransitionEventIDs[id]
		for seq := 1; seq <= l.Version; seq++ {
			if len(inTopic[seq]) == 0 {
				r.TransitionsLost++
				if r.TransitionsLost == 1 {
					r.Notes = append(r.Notes, fmt.Sprintf("transitions lost: payment %s (%s, version %d) has no event of sequence %d in the topic", id, l.Status, l.Version, seq))
				}
			}
		}
		for _, e := range o.Topic.PaymentOrder[id] {
			if e.Sequence <= l.Version && e.Type == l.ExpectedType(e.Sequence) {
				continue
			}
			r.TransitionsPhantom++
			if r.TransitionsPhantom == 1 {
				r.Notes = append(r.Notes, fmt.Sprintf("phantom transitions: payment %s (%s, version %d) has a %s of sequence %d in the topic", id, l.Status, l.Version, e.Type, e.Sequence))
			}
		}
	}
	fillConsumerOrder(o, r)
}

// fillConsumerOrder checks the order in which the consumer took each payment's events:
// 1, 2, 3 ... with nothing skipped, as for the topic, and every committed transition
// taken by the end.
func fillConsumerOrder(o verify.Observed, r *verdict.Report) {
	r.ConsumerOrderViolations, r.ConsumerTransitionsMissing, r.ConsumerOwnViolations = 0, 0, o.ConsumerOwnViolations
	if o.ConsumerOrder == nil {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(o.ConsumerOrder)) {
		seqs := o.ConsumerOrder[id]
		for i, s := range seqs {
			if s != i+1 {
				r.ConsumerOrderViolations++
				if r.ConsumerOrderViolations == 1 {
					r.Notes = append(r.Notes, fmt.Sprintf("consumer order: the consumer took payment %s's events in the sequence %v", id, seqs))
				}
				break
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(o.Lifecycles)) {
		if _, decided := o.Decisions[id]; !decided {
			continue // already lost
		}
		if got, want := len(o.ConsumerOrder[id]), o.Lifecycles[id].Version; got < want {
			r.ConsumerTransitionsMissing++
			if r.ConsumerTransitionsMissing == 1 {
				r.Notes = append(r.Notes, fmt.Sprintf("consumer order: payment %s has %d transitions committed, the consumer took %d", id, want, got))
			}
		}
	}
}

// outOfSequence returns the index of the first event that comes after one of a higher
// sequence, or 0 when the sequences only grow. Equal sequences (two event ids for one
// transition) are the "one event id per transition" check's business.
func outOfSequence(seqs []int) int {
	for i := 1; i < len(seqs); i++ {
		if seqs[i] < seqs[i-1] {
			return i
		}
	}
	return 0
}

func sequencesOf(events []verify.TopicEvent) []int {
	seqs := make([]int, len(events))
	for i, e := range events {
		seqs[i] = e.Sequence
	}
	return seqs
}

// describe lists events as "PaymentCreated 1, PaymentCaptured 2".
func describe(events []verify.TopicEvent) string {
	parts := make([]string, len(events))
	for i, e := range events {
		parts[i] = fmt.Sprintf("%s %d", e.Type, e.Sequence)
	}
	return strings.Join(parts, ", ")
}

// eventsInFlight counts the payments that had an event committed (answered by the API)
// while one of their earlier events had not reached the topic yet (firstSeenS, seconds
// from origin; never seen counts as not yet), and of those the ones whose later event was
// committed inside one of the fault windows. Such a payment is the test of the relay's
// order: it held both events at once, and only its per-aggregate check kept the later one
// back.
func eventsInFlight(committed []load.CommittedEvent, firstSeenS map[string]float64, origin time.Time, windows []faults.Window) (total, inFaults int) {
	byPayment := map[string][]load.CommittedEvent{}
	for _, e := range committed {
		byPayment[e.PaymentID] = append(byPayment[e.PaymentID], e)
	}
	for _, events := range byPayment {
		slices.SortFunc(events, func(a, b load.CommittedEvent) int { return a.Sequence - b.Sequence })
		inFlight, duringFault := false, false
		for i := 1; i < len(events); i++ {
			at := events[i].At.Sub(origin).Seconds()
			for _, earlier := range events[:i] {
				seen, ok := firstSeenS[earlier.EventID]
				if ok && seen <= at {
					continue
				}
				inFlight = true
				for _, w := range windows {
					if at >= w.StartS && (w.EndS < 0 || at <= w.EndS) {
						duringFault = true
					}
				}
			}
		}
		if inFlight {
			total++
		}
		if duringFault {
			inFaults++
		}
	}
	return total, inFaults
}

// OrderInFlightCheck is the order validity row: payments had several events in flight at
// once, during a fault window when the scenario has windows, so that the order checks had
// something to catch.
func OrderInFlightCheck(r *verdict.Report) verdict.Check {
	ev := r.Evidence
	const name = "order: payments with several events in flight (committed before the previous one reached the topic)"
	if !r.LifecycleLoad {
		return verdict.OffCheck(verdict.Validity, name, "> 0", "the load sent no transitions (the service has no lifecycle endpoints)")
	}
	if len(r.FaultWindows) == 0 {
		return verdict.NewCheck(verdict.Validity, name, "> 0", ev.EventsInFlight, ev.EventsInFlight > 0)
	}
	got := fmt.Sprintf("%d during fault windows (%d in all)", ev.EventsInFlightInFaults, ev.EventsInFlight)
	return verdict.NewCheck(verdict.Validity, name+" during faults", "> 0", got, ev.EventsInFlightInFaults > 0)
}
