package harness

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
)

// fillTotals adds the users whose running totals differ to the duplicate effects, and
// notes the first few differences, so that a mentor sees which way they go (more than
// committed: an event applied twice; less: an effect missing beside its decision).
func fillTotals(o verify.Observed, r *verdict.Report) {
	mismatches := totalsMismatches(o.ExpectedTotals, o.ConsumerTotals)
	r.TotalsMismatchedUsers = usersIn(mismatches)
	r.DuplicateEffects += r.TotalsMismatchedUsers
	const shown = 3
	for i, m := range mismatches {
		if i == shown {
			r.Notes = append(r.Notes, fmt.Sprintf("running totals: %d more differ", len(mismatches)-shown))
			break
		}
		r.Notes = append(r.Notes, fmt.Sprintf("running totals of %s in %s: consumer %d payments for %s, committed %d for %s",
			m.Key.UserID, m.Key.Currency, m.Got.Payments, m.Got.Amount, m.Want.Payments, m.Want.Amount))
	}
}

// A totalsMismatch is one user and currency whose totals differ: Want computed from the
// committed payments, Got read from the consumer.
type totalsMismatch struct {
	Key       verify.UserCurrency
	Want, Got verify.RunningTotal
}

// usersIn counts the distinct users of the mismatches: what duplicate_effects adds.
func usersIn(mismatches []totalsMismatch) int {
	users := map[string]bool{}
	for _, m := range mismatches {
		users[m.Key.UserID] = true
	}
	return len(users)
}

// totalsMismatches compares the consumer's totals with the expected ones and returns every
// user and currency that differs, sorted. A missing row is a total of zero.
func totalsMismatches(want, got map[verify.UserCurrency]verify.RunningTotal) []totalsMismatch {
	var out []totalsMismatch
	for _, k := range unionKeys(want, got) {
		w, g := want[k], got[k]
		if w != g && !(w.IsZero() && g.IsZero()) {
			out = append(out, totalsMismatch{Key: k, Want: w, Got: g})
		}
	}
	return out
}

func unionKeys(a, b map[verify.UserCurrency]verify.RunningTotal) []verify.UserCurrency {
	var keys []verify.UserCurrency
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y verify.UserCurrency) int {
		return cmp.Or(strings.Compare(x.UserID, y.UserID), strings.Compare(x.Currency, y.Currency))
	})
	return keys
}
