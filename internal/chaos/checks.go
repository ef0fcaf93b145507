package chaos

import (
	"fmt"
	"strings"
)

// sloChecks are the course's SLOs, made exact. The dual-write run inverts the lost
// check: it passes when it shows the loss it exists to show.
func sloChecks(r *Report, dualWrite bool) []Check {
	lostGot := fmt.Sprintf("%d (no event %d, no decision %d, 201 but not committed %d)", r.Lost, r.LostNoEvent, r.LostNoDecision, r.LostNotCommitted)
	lost := check(SLO, "lost (no event or no decision)", "0", lostGot, r.Lost == 0)
	if dualWrite {
		lost = check(SLO, "lost: the anti-pattern loses events", "> 0", lostGot, r.Lost > 0)
	}
	duplicateEffects := check(SLO, "duplicate effects (payments with >1 decision + users whose totals differ)", "0", r.DuplicateEffects, r.DuplicateEffects == 0)
	if !r.Schema.UserTotals {
		duplicateEffects.Got += " (totals not compared: no user_totals)"
	}
	checks := []Check{
		lost,
		check(SLO, "phantom (event or decision, no payment)", "0", r.Phantom, r.Phantom == 0),
		duplicateEffects,
		check(SLO, "one event id per payment (payments with >1 X-Event-Id)", "0", r.PaymentsWithSeveralEventIDs, r.PaymentsWithSeveralEventIDs == 0),
		decisionEventCheck(r),
		check(SLO, "api accepted every payment", fmt.Sprint(r.PaymentsSent), r.APIAccepted, r.APIAccepted == r.PaymentsSent),
		check(SLO, "committed == accepted + warm-up (idempotency)", fmt.Sprint(r.APIAccepted+r.WarmupPayments), r.PaymentsCommitted, r.PaymentsCommitted == r.APIAccepted+r.WarmupPayments),
	}
	if !dualWrite {
		checks = append(checks, dlqCheck(r), drainCheck(r))
	}
	return checks
}

// decisionEventCheck is off when the decisions' event ids cannot be read; with a
// consumer database that is a missing MUST, which the contract row "consumer tables"
// fails.
func decisionEventCheck(r *Report) Check {
	const name, want = "decision_event_mismatch (decision's event_id not the topic's)", "0"
	switch {
	case !r.Schema.ConsumerDatabase:
		return checkOff(SLO, name, want, "no consumer database given")
	case !r.Schema.DecisionEventIDs:
		return checkOff(SLO, name, want, "no decisions.event_id column")
	}
	return check(SLO, name, want, r.DecisionEventMismatch, r.DecisionEventMismatch == 0)
}

// dlqCheck says where the dead letters were counted, since a service may keep either
// table, and is off when it keeps neither.
func dlqCheck(r *Report) Check {
	const name, want = "dlq", "0"
	switch s := r.Schema; {
	case !s.OutboxDLQ && !s.OutboxEvents:
		return checkOff(SLO, name, want, "dead-letter check off: no outbox_dlq and no outbox_events table")
	case !s.OutboxDLQ:
		return check(SLO, name, want, fmt.Sprintf("%d (outbox_events status failed only: no outbox_dlq)", r.DLQ), r.DLQ == 0)
	case !s.OutboxEvents:
		return check(SLO, name, want, fmt.Sprintf("%d (outbox_dlq only: no outbox_events)", r.DLQ), r.DLQ == 0)
	}
	return check(SLO, name, want, r.DLQ, r.DLQ == 0)
}

// drainCheck says how the drain was measured: from the outbox, or, without one, from the
// topic (every committed payment has an event).
func drainCheck(r *Report) Check {
	got := fmt.Sprintf("%.1f", r.DrainSeconds)
	if !r.Schema.OutboxEvents {
		got += " (measured from the topic: no outbox_events)"
	}
	return check(SLO, "drain_seconds", "<= 300", got, r.DrainSeconds >= 0 && r.DrainSeconds <= 300)
}

// contractChecks are the rules of docs/contract.md that other programs rely on: what
// every record carries, the topic's partitions, and the consumer tables that the SLO
// checks read. The first record that breaks a rule is in the notes.
func contractChecks(r *Report) []Check {
	consumerTables := check(Contract, "consumer tables: decisions(payment_id, event_id), user_totals", "present", "present", true)
	switch missing := r.Schema.MissingConsumerTables(); {
	case !r.Schema.ConsumerDatabase:
		consumerTables = checkOff(Contract, consumerTables.Name, consumerTables.Want, "no consumer database given: decisions, their event ids and totals not checked")
	case len(missing) > 0:
		consumerTables = check(Contract, consumerTables.Name, consumerTables.Want, "missing "+strings.Join(missing, ", "), false)
	}
	return []Check{
		check(Contract, "record key is the payment id", "0", r.BadKeys, r.BadKeys == 0),
		check(Contract, "record headers (X-Event-Id, X-Event-Type, X-Event-Occurred-At)", "0", r.BadHeaders, r.BadHeaders == 0),
		check(Contract, "record payload is PaymentCreated v1 with every field", "0", r.BadPayloads, r.BadPayloads == 0),
		check(Contract, "payload matches the committed payment (user, amount, currency)", "0", r.PayloadMismatches, r.PayloadMismatches == 0),
		check(Contract, "topic partitions", fmt.Sprint(r.ExpectedPartitions), r.TopicPartitions, r.TopicPartitions == r.ExpectedPartitions),
		consumerTables,
	}
}
