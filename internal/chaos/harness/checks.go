package harness

import (
	"fmt"
	"strings"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// sloChecks are the course's SLOs, made exact. The dual-write run inverts the lost
// checks (lost, and the transitions' lost events): it passes when it shows the loss it
// exists to show.
func sloChecks(r *verdict.Report, dualWrite bool) []verdict.Check {
	lostGot := fmt.Sprintf("%d (no event %d, no decision %d, 201 but not committed %d)", r.Lost, r.LostNoEvent, r.LostNoDecision, r.LostNotCommitted)
	lost := verdict.NewCheck(verdict.SLO, "lost (no event or no decision)", "0", lostGot, r.Lost == 0)
	if dualWrite {
		lost = verdict.NewCheck(verdict.SLO, "lost: the anti-pattern loses events", "> 0", lostGot, r.Lost > 0)
	}
	duplicateEffects := verdict.NewCheck(verdict.SLO, "duplicate effects (payments with >1 decision + users whose totals differ)", "0", r.DuplicateEffects, r.DuplicateEffects == 0)
	if !r.Schema.UserTotals {
		duplicateEffects.Got += " (totals not compared: no user_totals)"
	}
	checks := []verdict.Check{
		lost,
		verdict.NewCheck(verdict.SLO, "phantom (event or decision, no payment)", "0", r.Phantom, r.Phantom == 0),
		duplicateEffects,
		eventIDsCheck(r),
		orderViolationsCheck(r),
		transitionsCheck(r, dualWrite),
		consumerOrderCheck(r),
		racesCheck(r),
		decisionEventCheck(r),
		serverErrorsCheck(r),
		sameKeyCheck(r),
		verdict.NewCheck(verdict.SLO, "api accepted every payment", fmt.Sprint(r.PaymentsSent), r.APIAccepted, r.APIAccepted == r.PaymentsSent),
		verdict.NewCheck(verdict.SLO, "committed == accepted + warm-up (idempotency)", fmt.Sprint(r.APIAccepted+r.WarmupPayments), r.PaymentsCommitted, r.PaymentsCommitted == r.APIAccepted+r.WarmupPayments),
	}
	if !dualWrite {
		checks = append(checks, dlqCheck(r), drainCheck(r))
	}
	return checks
}

// eventIDsCheck: one X-Event-Id per transition, on every retry of its publish.
func eventIDsCheck(r *verdict.Report) verdict.Check {
	return verdict.NewCheck(verdict.SLO, "one event id per transition (payments with >1 X-Event-Id for one sequence)", "0", r.PaymentsWithSeveralEventIDs, r.PaymentsWithSeveralEventIDs == 0)
}

// orderViolationsCheck: each payment's events in sequence on the topic.
func orderViolationsCheck(r *verdict.Report) verdict.Check {
	return verdict.NewCheck(verdict.SLO, "order_violations (payments whose events, first occurrences in offset order, are out of sequence)", "0",
		fmt.Sprintf("%d (of %d payments with several events)", r.OrderViolations, r.MultiEventPayments), r.OrderViolations == 0)
}

// transitionsCheck compares the committed transitions with the topic: each has its
// event, and no event is of a transition that was not committed. Off without the
// payments' lifecycle columns, the only record of what was committed.
//
// The creation is a payment's first transition, so a lost PaymentCreated is counted
// here as well as in the lost row. The dual-write run, whose handler publishes after
// its commit and moves on when that fails, must lose some (the lost row's inversion)
// and can still never publish the event of a transition it did not commit.
func transitionsCheck(r *verdict.Report, dualWrite bool) verdict.Check {
	name, want := "transitions: committed without event + event without committed transition", "0"
	if dualWrite {
		name, want = "transitions: the anti-pattern loses their events, never invents one", "lost > 0, phantom 0"
	}
	if !r.Schema.PaymentLifecycle {
		return verdict.OffCheck(verdict.SLO, name, want, "no payments.status, version and refunded_amount")
	}
	got := fmt.Sprintf("%d (lost %d, phantom %d)", r.TransitionsLost+r.TransitionsPhantom, r.TransitionsLost, r.TransitionsPhantom)
	if dualWrite {
		return verdict.NewCheck(verdict.SLO, name, want, got, r.TransitionsLost > 0 && r.TransitionsPhantom == 0)
	}
	return verdict.NewCheck(verdict.SLO, name, want, got, r.TransitionsLost+r.TransitionsPhantom == 0)
}

// consumerOrderCheck checks the consumer's applied order the way order_violations checks
// the topic's: each payment's events taken 1, 2, 3 ..., and all of its committed ones.
func consumerOrderCheck(r *verdict.Report) verdict.Check {
	const name, want = "consumer applied order (payments out of sequence + decided payments missing transitions)", "0"
	switch {
	case !r.Schema.ConsumerDatabase:
		return verdict.OffCheck(verdict.SLO, name, want, "no consumer database given")
	case !r.Schema.ConsumerOrder:
		return verdict.OffCheck(verdict.SLO, name, want, "no processed_events.sequence and processed_order")
	}
	bad := r.ConsumerOrderViolations + r.ConsumerTransitionsMissing
	got := fmt.Sprintf("%d (out of sequence %d, missing %d)", bad, r.ConsumerOrderViolations, r.ConsumerTransitionsMissing)
	if r.ConsumerOwnViolations >= 0 {
		got += fmt.Sprintf("; its own order_violations: %d", r.ConsumerOwnViolations)
	}
	return verdict.NewCheck(verdict.SLO, name, want, got, bad == 0 && r.ConsumerOwnViolations <= 0)
}

// racesCheck is the API's side of concurrent transitions: of two racing on one payment,
// exactly one wins and the other gets 409. Off when the load sent no races.
func racesCheck(r *verdict.Report) verdict.Check {
	const name = "concurrent transitions: exactly one winner and one 409 per race"
	t := r.Transitions
	if t.Races == 0 {
		return verdict.OffCheck(verdict.SLO, name, "every race", "the load sent no races")
	}
	return verdict.NewCheck(verdict.SLO, name, fmt.Sprint(t.Races), fmt.Sprintf("%d (transitions: %d committed, %d conflicts, %d failed)", t.RacesOneWinner, t.Committed, t.Conflicts, t.Failed),
		t.RacesOneWinner == t.Races)
}

// decisionEventCheck is off when the decisions' event ids cannot be read; with a
// consumer database that is a missing MUST, which the contract row "consumer tables"
// fails.
func decisionEventCheck(r *verdict.Report) verdict.Check {
	const name, want = "decision_event_mismatch (decision's event_id not the topic's)", "0"
	switch {
	case !r.Schema.ConsumerDatabase:
		return verdict.OffCheck(verdict.SLO, name, want, "no consumer database given")
	case !r.Schema.DecisionEventIDs:
		return verdict.OffCheck(verdict.SLO, name, want, "no decisions.event_id column")
	}
	return verdict.NewCheck(verdict.SLO, name, want, r.DecisionEventMismatch, r.DecisionEventMismatch == 0)
}

// dlqCheck says where the dead letters were counted, since a service may keep either
// table, and is off when it keeps neither.
func dlqCheck(r *verdict.Report) verdict.Check {
	const name, want = "dlq", "0"
	switch s := r.Schema; {
	case !s.OutboxDLQ && !s.OutboxEvents:
		return verdict.OffCheck(verdict.SLO, name, want, "dead-letter check off: no outbox_dlq and no outbox_events table")
	case !s.OutboxDLQ:
		return verdict.NewCheck(verdict.SLO, name, want, fmt.Sprintf("%d (outbox_events status failed only: no outbox_dlq)", r.DLQ), r.DLQ == 0)
	case !s.OutboxEvents:
		return verdict.NewCheck(verdict.SLO, name, want, fmt.Sprintf("%d (outbox_dlq only: no outbox_events)", r.DLQ), r.DLQ == 0)
	}
	return verdict.NewCheck(verdict.SLO, name, want, r.DLQ, r.DLQ == 0)
}

// drainCheck says how the drain was measured: from the outbox, or, without one, from the
// topic (every committed payment has an event).
func drainCheck(r *verdict.Report) verdict.Check {
	got := fmt.Sprintf("%.1f", r.DrainSeconds)
	if !r.Schema.OutboxEvents {
		got += " (measured from the topic: no outbox_events)"
	}
	return verdict.NewCheck(verdict.SLO, "drain_seconds", "<= 300", got, r.DrainSeconds >= 0 && r.DrainSeconds <= 300)
}

// contractChecks are the rules of docs/contract.md that other programs rely on: what
// every record carries, the topic's partitions, and the consumer tables that the SLO
// checks read. The first record that breaks a rule is in the notes.
func contractChecks(r *verdict.Report) []verdict.Check {
	consumerTables := verdict.NewCheck(verdict.Contract, "consumer tables: decisions(payment_id, event_id), user_totals", "present", "present", true)
	switch missing := r.Schema.MissingConsumerTables(); {
	case !r.Schema.ConsumerDatabase:
		consumerTables = verdict.OffCheck(verdict.Contract, consumerTables.Name, consumerTables.Want, "no consumer database given: decisions, their event ids and totals not checked")
	case len(missing) > 0:
		consumerTables = verdict.NewCheck(verdict.Contract, consumerTables.Name, consumerTables.Want, "missing "+strings.Join(missing, ", "), false)
	}
	return []verdict.Check{
		verdict.NewCheck(verdict.Contract, "record key is the payment id", "0", r.BadKeys, r.BadKeys == 0),
		verdict.NewCheck(verdict.Contract, "record headers (X-Event-Id, X-Event-Type, X-Event-Occurred-At)", "0", r.BadHeaders, r.BadHeaders == 0),
		verdict.NewCheck(verdict.Contract, "record payload is the v1 of its type with every field", "0", r.BadPayloads, r.BadPayloads == 0),
		verdict.NewCheck(verdict.Contract, "payload matches the committed payment (user, amount, currency)", "0", r.PayloadMismatches, r.PayloadMismatches == 0),
		verdict.NewCheck(verdict.Contract, "topic partitions", fmt.Sprint(r.ExpectedPartitions), r.TopicPartitions, r.TopicPartitions == r.ExpectedPartitions),
		consumerTables,
	}
}
