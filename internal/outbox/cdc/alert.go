package cdc

import (
	"context"

	"github.com/dscourse/payments-outbox/internal/outbox"
)

// alertDeadLetter raises the alert of a dead letter through the webhook both relays
// post to (delivery.Alerter): the same body, so that one receiver and one runbook serve
// both modes. The caller has logged the dead letter already. The stream waits for the
// call, which AlertTimeout bounds: a dead letter is rare, and its alert must not be lost
// to a relay that stops a moment later.
func (r *Relay) alertDeadLetter(ctx context.Context, d *outbox.DeadLetter) {
	r.alerter.Call(ctx, *d)
}
