package harness

import (
	"fmt"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// lessonChecks judge a run that loses acknowledged payments on purpose
// (Scenario.LosesAcknowledged). The payments the database lost after answering 201
// are the lesson: the run must show some. Their events may already be on the topic and
// decided, so the phantom, totals and committed-count rows cannot hold and are not
// judged; what the surviving database does hold is judged as in every run: each of its
// payments has its event and decision, one event id per transition, in order.
func lessonChecks(r *verdict.Report) []verdict.Check {
	return []verdict.Check{
		verdict.NewCheck(verdict.SLO, "201 for a payment the database lost after answering: the lesson (the outbox is only as durable as the commit)", "> 0",
			fmt.Sprintf("%d (payments on the topic or decided that the database does not have: %d)", r.LostNotCommitted, r.Phantom), r.LostNotCommitted > 0),
		verdict.NewCheck(verdict.SLO, "lost among the payments the database has (no event or no decision)", "0",
			fmt.Sprintf("no event %d, no decision %d", r.LostNoEvent, r.LostNoDecision), r.LostNoEvent+r.LostNoDecision == 0),
		verdict.NewCheck(verdict.SLO, "one event id per transition (payments with >1 X-Event-Id for one sequence)", "0", r.PaymentsWithSeveralEventIDs, r.PaymentsWithSeveralEventIDs == 0),
		verdict.NewCheck(verdict.SLO, "order_violations (payments whose events, first occurrences in offset order, are out of sequence)", "0",
			fmt.Sprintf("%d (of %d payments with several events)", r.OrderViolations, r.MultiEventPayments), r.OrderViolations == 0),
		serverErrorsCheck(r),
	}
}
