package harness

import (
	"fmt"
	"strings"

	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// The SLO rows of what the load generator's clients saw.

// answers5xxRow names the SLO row that counts every 5xx answer but 503. A retry hides a
// 500 from the load's totals (the retried request may well succeed), so the load counts
// every attempt's answer, first attempts and retries, creations and transitions. 503
// with Retry-After is the contract's answer while the database is down and stays out;
// a 503 without Retry-After is a 5xx the contract does not allow and counts. The
// dual-write handler answers 201 when its publish fails, so its run wants 0 as well.
const answers5xxRow = "answers 5xx other than 503 (first attempts and retries)"

// serverErrorsCheck is answers5xxRow.
func serverErrorsCheck(r *verdict.Report) verdict.Check {
	got := fmt.Sprint(r.ServerErrors.Count)
	if len(r.ServerErrors.First) > 0 {
		got += " (first: " + strings.Join(r.ServerErrors.First, ", ") + ")"
	}
	return verdict.NewCheck(verdict.SLO, answers5xxRow, "0", got, r.ServerErrors.Count == 0)
}

// sameKeyEvery is the share of a scenario's payments that several clients send at once
// with one key (load.Config.SameKeyEvery).
const sameKeyEvery = 10

// sameKeyRow names the SLO row of the concurrent same-key requests.
const sameKeyRow = "concurrent same-key requests: every 201 (200) of one key names one payment (one event)"

// sameKeyCheck is sameKeyRow; off when the load sent no key from several clients.
func sameKeyCheck(r *verdict.Report) verdict.Check {
	s := r.SameKey
	if s.Keys == 0 {
		return verdict.OffCheck(verdict.SLO, sameKeyRow, "0 split keys", "the load sent no key from several clients at once")
	}
	got := fmt.Sprintf("%d split of %d keys sent by %d clients at once", s.Split, s.Keys, load.SameKeyCopies)
	if s.FirstSplit != "" {
		got += "; first: " + s.FirstSplit
	}
	return verdict.NewCheck(verdict.SLO, sameKeyRow, "0 split keys", got, s.Split == 0)
}
