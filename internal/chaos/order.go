package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/event"
)

// The lifecycle checks (docs/adr/0006): a payment has several events, one per committed
// transition, each with its sequence number, and they must reach the topic, and the
// consumer, in that sequence. The relay's claim keeps that order only if it never
// publishes an event while an earlier one of its aggregate is unfinished; a claim without
// that check publishes a capture held back by no fault before its creation held back by
// one, and the topic shows it.

// A CommittedLifecycle is what the payments table says of a payment's transitions.
type CommittedLifecycle struct {
	Status string
	// Version is the number of committed transitions, the creation included: the
	// events 1..Version must be in the topic, and no other.
	Version int
}

// expectedType is the event type of transition sequence of a payment that ended in
// status: 1 is the creation, 2 the capture or the cancellation, the rest refunds.
func (l CommittedLifecycle) expectedType(sequence int) string {
	switch {
	case sequence == event.CreatedSequence:
		return event.TypePaymentCreated
	case sequence == 2 && l.Status == "cancelled":
		return event.TypePaymentCancelled
	case sequence == 2:
		return event.TypePaymentCaptured
	default:
		return event.TypePaymentRefunded
	}
}

// committedLifecycles reads every payment's state and version.
func (v *Verifier) committedLifecycles(ctx context.Context) (map[string]CommittedLifecycle, error) {
	rows, err := v.payments.Query(ctx, `SELECT id::text, status::text, version::int FROM payments`)
	if err != nil {
		return nil, fmt.Errorf("read committed transitions: %w", err)
	}
	out := map[string]CommittedLifecycle{}
	var id string
	var l CommittedLifecycle
	_, err = pgx.ForEachRow(rows, []any{&id, &l.Status, &l.Version}, func() error {
		out[id] = l
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read committed transitions: %w", err)
	}
	return out, nil
}

// consumerOrder reads, per payment, the sequences of the events the consumer took, in
// the order it took them (processed_events.processed_order), and the number of rows in
// its own order_violations table, -1 without one.
func (v *Verifier) consumerOrder(ctx context.Context, schema Schema) (map[string][]int, int, error) {
	rows, err := v.consumer.Query(ctx, `
		SELECT payment_id::text, sequence FROM processed_events
		WHERE sequence IS NOT NULL ORDER BY processed_order`)
	if err != nil {
		return nil, 0, fmt.Errorf("read the consumer's applied order: %w", err)
	}
	order := map[string][]int{}
	var id string
	var sequence int
	_, err = pgx.ForEachRow(rows, []any{&id, &sequence}, func() error {
		order[id] = append(order[id], sequence)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read the consumer's applied order: %w", err)
	}
	own := -1
	if schema.OrderViolations {
		if err := v.consumer.QueryRow(ctx, `SELECT count(*) FROM order_violations`).Scan(&own); err != nil {
			return nil, 0, fmt.Errorf("count the consumer's order violations: %w", err)
		}
	}
	return order, own, nil
}

// fillOrder counts the payments whose events the topic shows out of their sequence, the
// committed transitions without an event and the events of transitions never committed,
// and the consumer's applied order.
func (o Observed) fillOrder(r *Report) {
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
			if e.Sequence <= l.Version && e.Type == l.expectedType(e.Sequence) {
				continue
			}
			r.TransitionsPhantom++
			if r.TransitionsPhantom == 1 {
				r.Notes = append(r.Notes, fmt.Sprintf("phantom transitions: payment %s (%s, version %d) has a %s of sequence %d in the topic", id, l.Status, l.Version, e.Type, e.Sequence))
			}
		}
	}
	o.fillConsumerOrder(r)
}

// fillConsumerOrder checks the order in which the consumer took each payment's events:
// 1, 2, 3 ... with nothing skipped, as for the topic, and every committed transition
// taken by the end.
func (o Observed) fillConsumerOrder(r *Report) {
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

func sequencesOf(events []TopicEvent) []int {
	seqs := make([]int, len(events))
	for i, e := range events {
		seqs[i] = e.Sequence
	}
	return seqs
}

// describe lists events as "PaymentCreated 1, PaymentCaptured 2".
func describe(events []TopicEvent) string {
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
func eventsInFlight(committed []CommittedEvent, firstSeenS map[string]float64, origin time.Time, windows []Window) (total, inFaults int) {
	byPayment := map[string][]CommittedEvent{}
	for _, e := range committed {
		byPayment[e.PaymentID] = append(byPayment[e.PaymentID], e)
	}
	for _, events := range byPayment {
		slices.SortFunc(events, func(a, b CommittedEvent) int { return a.Sequence - b.Sequence })
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

// orderInFlightCheck is the order validity row: payments had several events in flight at
// once, during a fault window when the scenario has windows, so that the order checks had
// something to catch.
func orderInFlightCheck(r *Report) Check {
	ev := r.Evidence
	const name = "order: payments with several events in flight (committed before the previous one reached the topic)"
	if !r.LifecycleLoad {
		return checkOff(Validity, name, "> 0", "the load sent no transitions (the service has no lifecycle endpoints)")
	}
	if len(r.FaultWindows) == 0 {
		return check(Validity, name, "> 0", ev.EventsInFlight, ev.EventsInFlight > 0)
	}
	got := fmt.Sprintf("%d during fault windows (%d in all)", ev.EventsInFlightInFaults, ev.EventsInFlight)
	return check(Validity, name+" during faults", "> 0", got, ev.EventsInFlightInFaults > 0)
}
