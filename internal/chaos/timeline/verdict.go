package timeline

import (
	"fmt"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// A badge is the verdict as a page shows it beside a run's name.
type badge struct {
	// Class picks its colour: the verdict (PASS, FAIL, INVALID) or LESSON.
	Class string
	Text  string
	// Title is the badge's tooltip: what the word means for this run.
	Title string
}

// lessonClass colours the dual write's badge when it showed its loss: neither the
// green of a service that passed nor the red of one that failed.
const lessonClass = "LESSON"

// badgeOf is a run's verdict in a word or a few. The dual-write run passes when it
// loses events, the lesson it exists to show (its lost row is inverted, see
// verdict.Report.Pass): a green PASS beside "lost 95" would read as a service to copy,
// so its badge names the loss instead.
func badgeOf(r *verdict.Report) badge {
	if r.Outcome == verdict.Pass && isDualWriteRun(r) {
		return badge{
			Class: lessonClass,
			Text:  fmt.Sprintf("lost %d: the expected lesson", r.Lost),
			Title: "The harness's checks held: the anti-pattern lost events under the faults, as this run exists to show. Not a service to copy.",
		}
	}
	titles := map[string]string{
		verdict.Pass:    "Every fault bit and every SLO and contract check held.",
		verdict.Fail:    "An SLO or contract check failed.",
		verdict.Invalid: "Every SLO held, but a fault did not bite: the run proves nothing.",
	}
	return badge{Class: r.Outcome, Text: r.Outcome, Title: titles[r.Outcome]}
}

// adviceOf is the line under the verdict table: the report's own advice, except for
// the dual write that showed its loss, whose "PASS" is the harness's and not the
// service's.
func adviceOf(r *verdict.Report) string {
	if r.Outcome == verdict.Pass && isDualWriteRun(r) {
		return fmt.Sprintf("The expected lesson: the dual write lost %d of %d committed payments under the faults the outbox survives (its lost row must find a loss, and did); every other check held.", r.Lost, r.PaymentsCommitted)
	}
	return r.Advice()
}

// isDualWriteRun tells the dual-write run by its scenario's name, or by its timeline
// (isDualWrite), which a report without one lacks.
func isDualWriteRun(r *verdict.Report) bool {
	return r.Scenario == "dual-write" || isDualWrite(r)
}
