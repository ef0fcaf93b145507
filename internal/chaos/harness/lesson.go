package harness

import (
	"fmt"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// lessonChecks judge a run that loses acknowledged payments on purpose
// (Scenario.LosesAcknowledged). The payments the database lost after answering 201
// are the lesson: the run must show some. Their events may already be on the topic and
// decided, and the consumer's database, which failed over too, may have lost decisions
// it had committed after the consumer had committed their offsets; so the phantom,
// decision, totals and committed-count rows cannot hold and are not judged. What the
// outbox itself promises is judged as in every run: each payment the surviving database
// has is on the topic, with one event id per transition, in order.
func lessonChecks(r *verdict.Report) []verdict.Check {
	return []verdict.Check{
		verdict.NewCheck(verdict.SLO, "201 for a payment the database lost after answering: the lesson (the outbox is only as durable as the commit)", "> 0",
			fmt.Sprintf("%d (payments on the topic or decided that the database does not have: %d; payments it has without a decision: %d)", r.LostNotCommitted, r.Phantom, r.LostNoDecision),
			r.LostNotCommitted > 0),
		verdict.NewCheck(verdict.SLO, "payments the database has without an event in the topic", "0", r.LostNoEvent, r.LostNoEvent == 0),
		eventIDsCheck(r),
		orderViolationsCheck(r),
		serverErrorsCheck(r),
	}
}
