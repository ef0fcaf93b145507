package payment

import (
	"time"

	"github.com/google/uuid"
)

// The states of a payment (docs/adr/0006-payment-lifecycle.md), as stored in
// payments.status and shown by the API.
const (
	StateCreated           = "created"
	StateCaptured          = "captured"
	StatePartiallyRefunded = "partially_refunded"
	StateRefunded          = "refunded"
	StateCancelled         = "cancelled"
)

// The transitions a client can ask for, one endpoint each; also the action column of
// transition_keys.
const (
	ActionCapture = "capture"
	ActionRefund  = "refund"
	ActionCancel  = "cancel"
)

// A TransitionRequest is a validated request to move a payment on.
type TransitionRequest struct {
	// MerchantID is the merchant asking: a payment of another is NotFound.
	MerchantID uuid.UUID
	PaymentID  uuid.UUID
	// Action is ActionCapture, ActionRefund or ActionCancel.
	Action string
	// RefundAmount is the amount to refund in minor units, > 0; 0 refunds whatever is
	// left. Only for ActionRefund.
	RefundAmount int64
}

// A Transition is what a valid request does to a payment: the payment as it will be,
// and, for a refund, the refund's amount.
type Transition struct {
	Before, After Payment
	// Refunded is the amount this transition refunds; 0 unless the action is a refund.
	Refunded int64
}

// next checks req against the lifecycle and returns what it does to p at time now.
// Every refusal is a Conflict naming the state the payment is in, so that a client that
// lost a race learns what won it. It is pure: the store calls it under the row lock.
func next(p Payment, req TransitionRequest, now time.Time) (Transition, error) {
	t := Transition{Before: p, After: p}
	t.After.Version = p.Version + 1
	t.After.UpdatedAt = &now
	switch req.Action {
	case ActionCapture:
		if p.Status != StateCreated {
			return Transition{}, Errorf(Conflict, "status", "payment %s is %s; only a created payment can be captured", p.ID, p.Status)
		}
		t.After.Status = StateCaptured
	case ActionCancel:
		if p.Status != StateCreated {
			return Transition{}, Errorf(Conflict, "status", "payment %s is %s; only a created payment can be cancelled (refund a captured one instead)", p.ID, p.Status)
		}
		t.After.Status = StateCancelled
	case ActionRefund:
		if p.Status != StateCaptured && p.Status != StatePartiallyRefunded {
			return Transition{}, Errorf(Conflict, "status", "payment %s is %s; only a captured or partially refunded payment can be refunded", p.ID, p.Status)
		}
		left := p.Amount - p.RefundedAmount
		t.Refunded = req.RefundAmount
		if t.Refunded == 0 {
			t.Refunded = left
		}
		if t.Refunded > left {
			return Transition{}, Errorf(Conflict, "amount", "payment %s is %s with %d left to refund; a refund of %d would exceed the captured amount %d",
				p.ID, p.Status, left, t.Refunded, p.Amount)
		}
		t.After.RefundedAmount = p.RefundedAmount + t.Refunded
		t.After.Status = StatePartiallyRefunded
		if t.After.RefundedAmount == p.Amount {
			t.After.Status = StateRefunded
		}
	default:
		// The routes only ever pass the three actions above.
		return Transition{}, Errorf(Invalid, "", "unknown transition %q", req.Action)
	}
	return t, nil
}
