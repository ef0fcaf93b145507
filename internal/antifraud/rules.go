package antifraud

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
)

// A Verdict is what the consumer decides about a payment.
type Verdict string

// The verdicts, from the mildest to the most severe.
const (
	Approve Verdict = "approve"
	Review  Verdict = "review"
	Block   Verdict = "block"
)

// severity orders the verdicts so that the most severe rule wins.
func (v Verdict) severity() int {
	switch v {
	case Review:
		return 1
	case Block:
		return 2
	default:
		return 0
	}
}

// Reason codes, stored in decisions.reasons. Codes rather than sentences, so that they can
// be counted and queried.
const (
	ReasonAmountAboveReview   = "amount_above_review_threshold"
	ReasonVelocityAboveReview = "velocity_above_review_limit"
	ReasonVelocityAboveBlock  = "velocity_above_block_limit"
	ReasonTotalAboveReview    = "total_above_review_threshold"
)

// Rules are the thresholds of the fraud rules. The zero value of a field means its default.
type Rules struct {
	// ReviewAmount: a payment whose amount (in minor units, e.g. cents) is strictly above it
	// goes to review. The same number applies to every currency: a simplification of a
	// teaching example. Default 100000 (1,000.00).
	ReviewAmount int64
	// VelocityWindow is the width of the velocity window in event time. Default 10m.
	VelocityWindow time.Duration
	// VelocityReview: more than this many payments by one user within VelocityWindow,
	// the payment being decided included, go to review. Default 5.
	VelocityReview int
	// VelocityBlock: more than this many payments by one user within VelocityWindow, the
	// payment being decided included, are blocked. Default 10.
	VelocityBlock int
	// TotalReviewAmount: a payment that takes its user's running total in its currency (every
	// payment of the user in that currency processed so far, this one included) strictly
	// above it goes to review, as accounts whose lifetime volume calls for a manual check
	// do. Once a user is above it, each further payment in that currency goes to review.
	// Default 1000000000 minor units (10,000,000.00): far above what the tests, the
	// benchmarks and the chaos loads reach, so that only the tests written for it see it.
	TotalReviewAmount int64
}

// withDefaults returns the rules with every zero field set to its default.
func (r Rules) withDefaults() Rules {
	r.ReviewAmount = cmp.Or(r.ReviewAmount, 100_000)
	r.VelocityWindow = cmp.Or(r.VelocityWindow, 10*time.Minute)
	r.VelocityReview = cmp.Or(r.VelocityReview, 5)
	r.VelocityBlock = cmp.Or(r.VelocityBlock, 10)
	r.TotalReviewAmount = cmp.Or(r.TotalReviewAmount, 1_000_000_000)
	return r
}

// Validate reports thresholds that cannot work together.
func (r Rules) Validate() error {
	r = r.withDefaults()
	var errs []error
	if r.ReviewAmount < 0 {
		errs = append(errs, fmt.Errorf("review amount is %d: want a positive number of minor units", r.ReviewAmount))
	}
	if r.TotalReviewAmount < 0 {
		errs = append(errs, fmt.Errorf("total review amount is %d: want a positive number of minor units", r.TotalReviewAmount))
	}
	if r.VelocityWindow < 0 {
		errs = append(errs, fmt.Errorf("velocity window is %s: want a positive duration such as 10m", r.VelocityWindow))
	}
	if r.VelocityReview < 0 || r.VelocityBlock < 0 {
		errs = append(errs, fmt.Errorf("velocity limits are %d (review) and %d (block): want positive counts", r.VelocityReview, r.VelocityBlock))
	}
	if r.VelocityBlock < r.VelocityReview {
		errs = append(errs, fmt.Errorf("velocity block limit %d is below the review limit %d: want block >= review", r.VelocityBlock, r.VelocityReview))
	}
	return errors.Join(errs...)
}

// A Payment is what the rules look at: one payment, at the time it occurred.
type Payment struct {
	ID         uuid.UUID
	UserID     string
	Amount     int64
	Currency   string
	OccurredAt time.Time
}

// A History is what the consumer knows of the user of a payment, the payment itself left
// out: the database's view plus the earlier events of the same batch.
type History struct {
	// Recent counts the user's other payments in the velocity window before the payment
	// (see Rules.inVelocityWindow). The database's part of it stops at VelocityBlock:
	// beyond, the verdict is Block whatever the number.
	Recent int
	// Total is the user's running total in the payment's currency before the payment.
	Total Total
}

// A Total is a user's running total in one currency: the user_totals row.
type Total struct {
	Payments int64
	// Amount is the sum in minor units, capped at math.MaxInt64: the database keeps the
	// exact sum, and every threshold is an int64, so the cap never changes a verdict.
	Amount int64
}

// plus returns t with one more payment of amount, the sum capped at math.MaxInt64.
func (t Total) plus(amount int64) Total {
	t.Payments++
	if amount > math.MaxInt64-t.Amount {
		t.Amount = math.MaxInt64
	} else {
		t.Amount += amount
	}
	return t
}

// A Decision is the verdict on a payment and the reasons behind it.
type Decision struct {
	Verdict Verdict
	// Reasons are the codes of the rules that fired, in a fixed order; empty for Approve.
	Reasons []string
}

// inVelocityWindow reports whether other counts towards p's velocity: a payment of the same
// user, not p itself, that occurred in [p.OccurredAt - VelocityWindow, p.OccurredAt).
// Because the window is measured in event time and ends just before p, the count does not
// depend on when the event is processed, nor on how often it is delivered: only on which
// earlier payments are known (see the package documentation for the small order dependence
// that remains). The consumer's SQL count of committed decisions (store.go, selectHistory)
// uses the same bounds.
func (r Rules) inVelocityWindow(p, other Payment) bool {
	r = r.withDefaults()
	if other.ID == p.ID || other.UserID != p.UserID {
		return false
	}
	from := p.OccurredAt.Add(-r.VelocityWindow)
	return !other.OccurredAt.Before(from) && other.OccurredAt.Before(p.OccurredAt)
}

// Decide applies the rules to p, given what is known of its user before it.
func (r Rules) Decide(p Payment, h History) Decision {
	r = r.withDefaults()
	d := Decision{Verdict: Approve, Reasons: []string{}}
	raise := func(v Verdict, reason string) {
		if v.severity() > d.Verdict.severity() {
			d.Verdict = v
		}
		d.Reasons = append(d.Reasons, reason)
	}

	if p.Amount > r.ReviewAmount {
		raise(Review, ReasonAmountAboveReview)
	}
	if h.Total.plus(p.Amount).Amount > r.TotalReviewAmount {
		raise(Review, ReasonTotalAboveReview)
	}
	inWindow := h.Recent + 1 // p itself
	switch {
	case inWindow > r.VelocityBlock:
		raise(Block, ReasonVelocityAboveBlock)
	case inWindow > r.VelocityReview:
		raise(Review, ReasonVelocityAboveReview)
	}
	slices.Sort(d.Reasons)
	return d
}
