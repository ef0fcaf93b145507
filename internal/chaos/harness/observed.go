package harness

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/event"
)

// fillObserved computes the report's counts from what was observed and what the clients saw.
// The first example of every kind of failure goes into the notes, so that a mentor can
// look it up in the databases or the topic that a failed run keeps.
func fillObserved(o verify.Observed, r *verdict.Report) {
	r.PaymentsCommitted = len(o.Committed)
	r.EventsInTopic = o.Topic.Records
	r.UniqueEventsInTopic = o.Topic.Unique()
	r.DuplicatesDelivered = 0
	for _, n := range o.Topic.EventCopies {
		r.DuplicatesDelivered += n - 1
	}
	r.DLQ = o.DLQ
	r.ConsumerDuplicates = o.ConsumerDuplicates
	r.Schema = o.Schema
	r.TopicPartitions, r.ExpectedPartitions = o.Topic.Partitions, o.ExpectedPartitions
	r.Notes = append(r.Notes, o.Notes...)

	fillLost(o, r)
	fillIdentities(o, r)
	fillRecordContract(o, r)
	fillTotals(o, r)
	fillOrder(o, r)
}

// fillLost counts what the service lost and what it made up. A payment is lost when it
// is committed but has no event in the topic or no decision, and when the API answered
// 201 with its id but it was never committed; each id counts once.
func fillLost(o verify.Observed, r *verdict.Report) {
	r.Lost, r.LostNoEvent, r.LostNoDecision, r.LostNotCommitted, r.Phantom, r.DuplicateEffects, r.Decisions = 0, 0, 0, 0, 0, 0, 0
	lost := map[string]bool{}
	for id := range o.Committed {
		noEvent := o.Topic.PaymentEvents[id] == 0
		noDecision := o.Decisions != nil && o.Decisions[id] == 0
		if noEvent {
			r.LostNoEvent++
		}
		if noDecision {
			r.LostNoDecision++
		}
		if noEvent || noDecision {
			lost[id] = true
		}
	}
	var notCommitted []string
	for _, id := range o.Accepted {
		if _, ok := o.Committed[id]; !ok && !slices.Contains(notCommitted, id) {
			notCommitted = append(notCommitted, id)
			lost[id] = true
		}
	}
	r.LostNotCommitted = len(notCommitted)
	if len(notCommitted) > 0 {
		slices.Sort(notCommitted)
		r.Notes = append(r.Notes, fmt.Sprintf("lost: %d payment ids answered with 201 are not in the payments table, first %s", len(notCommitted), notCommitted[0]))
	}
	r.Lost = len(lost)

	phantom := map[string]bool{}
	for id := range o.Topic.PaymentEvents {
		if _, ok := o.Committed[id]; !ok {
			phantom[id] = true
		}
	}
	for id, n := range o.Decisions {
		r.Decisions += n
		if n > 1 {
			r.DuplicateEffects++
		}
		if _, ok := o.Committed[id]; !ok {
			phantom[id] = true
		}
	}
	r.Phantom = len(phantom)
}

// fillIdentities checks that each transition has one event id and that each decision
// names its payment's PaymentCreated. Counts alone cannot see either: a relay that mints a
// new id for every retry, and a consumer that records the wrong event, both leave one
// record per id and one decision per payment.
func fillIdentities(o verify.Observed, r *verdict.Report) {
	r.PaymentsWithSeveralEventIDs = 0
	for _, id := range slices.Sorted(maps.Keys(o.Topic.TransitionEventIDs)) {
		bySequence := o.Topic.TransitionEventIDs[id]
		for _, seq := range slices.Sorted(maps.Keys(bySequence)) {
			ids := bySequence[seq]
			if len(ids) < 2 {
				continue
			}
			r.PaymentsWithSeveralEventIDs++
			if r.PaymentsWithSeveralEventIDs == 1 {
				r.Notes = append(r.Notes, fmt.Sprintf("one event id per transition: payment %s has %d event ids for sequence %d in the topic: %s", id, len(ids), seq, strings.Join(ids, ", ")))
			}
			break
		}
	}

	r.DecisionEventMismatch = 0
	for _, id := range slices.Sorted(maps.Keys(o.DecisionEvents)) {
		inTopic := o.Topic.TransitionEventIDs[id][event.CreatedSequence]
		// A payment without an event in the topic is already lost or a phantom.
		if len(inTopic) == 0 || slices.Contains(inTopic, o.DecisionEvents[id]) {
			continue
		}
		r.DecisionEventMismatch++
		if r.DecisionEventMismatch == 1 {
			r.Notes = append(r.Notes, fmt.Sprintf("decision_event_mismatch: the decision of payment %s has event_id %s, the topic has %s",
				id, o.DecisionEvents[id], strings.Join(inTopic, ", ")))
		}
	}
}

// fillRecordContract copies the topic's contract violations into the report and adds
// the payloads that disagree with their committed payment.
func fillRecordContract(o verify.Observed, r *verdict.Report) {
	t := o.Topic
	r.BadKeys, r.BadHeaders, r.BadPayloads = t.BadKey.Count, t.BadHeaders.Count, t.BadPayload.Count
	for _, v := range []struct {
		rule string
		verify.Violations
	}{{"record key", t.BadKey}, {"record headers", t.BadHeaders}, {"record payload", t.BadPayload}} {
		if v.Count > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %d records break the contract, first at %s", v.rule, v.Count, v.First))
		}
	}

	r.PayloadMismatches = 0
	for _, id := range slices.Sorted(maps.Keys(t.PaymentPayloads)) {
		want, ok := o.Committed[id]
		if !ok {
			continue // a phantom
		}
		for _, got := range t.PaymentPayloads[id] {
			if got == want {
				continue
			}
			r.PayloadMismatches++
			if r.PayloadMismatches == 1 {
				r.Notes = append(r.Notes, fmt.Sprintf("payload of payment %s: %s; committed %s", id, got, want))
			}
			break
		}
	}
}
