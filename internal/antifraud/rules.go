package antifraud

import (
	"cmp"
	"errors"
	"fmt"
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
}

// withDefaults returns the rules with every zero field set to its default.
func (r Rules) withDefaults() Rules {
	r.ReviewAmount = cmp.Or(r.ReviewAmount, 100_000)
	r.VelocityWindow = cmp.Or(r.VelocityWindow, 10*time.Minute)
	r.VelocityReview = cmp.Or(r.VelocityReview, 5)
	r.VelocityBlock = cmp.Or(r.VelocityBlock, 10)
	return r
}

// Validate reports thresholds that cannot work together.
func (r Rules) Validate() error {
	r = r.withDefaults()
	var errs []error
	if r.ReviewAmount < 0 {
		errs = append(errs, fmt.Errorf("review amount is %d: want a positive number of minor units", r.ReviewAmount))
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
	OccurredAt time.Time
}

// A Decision is the verdict on a payment and the reasons behind it.
type Decision struct {
	Verdict Verdict
	// Reasons are the codes of the rules that fired, in a fixed order; empty for Approve.
	Reasons []string
}

// Decide applies the rules to p. history holds the same user's other payments the consumer
// already knows of; Decide itself picks those in the window [p.OccurredAt - window,
// p.OccurredAt) and ignores p if it is in history. Because the window is measured in event
// time and ends just before p, the answer does not depend on when the event is processed,
// nor on how often it is delivered: only on which earlier payments are known (see the
// package documentation for the small order dependence that remains).
func (r Rules) Decide(p Payment, history []Payment) Decision {
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

	inWindow := 1 // p itself
	from := p.OccurredAt.Add(-r.VelocityWindow)
	for _, h := range history {
		if h.ID == p.ID || h.UserID != p.UserID {
			continue
		}
		if !h.OccurredAt.Before(from) && h.OccurredAt.Before(p.OccurredAt) {
			inWindow++
		}
	}
	switch {
	case inWindow > r.VelocityBlock:
		raise(Block, ReasonVelocityAboveBlock)
	case inWindow > r.VelocityReview:
		raise(Review, ReasonVelocityAboveReview)
	}
	slices.Sort(d.Reasons)
	return d
}
