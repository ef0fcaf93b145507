package payment

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/outbox"
)

// A Transitioned is the outcome of Store.Transition.
type Transitioned struct {
	// Payment is the payment after the transition (for a replay: as it is now).
	Payment Payment
	// EventID is the id of the transition's event.
	EventID uuid.UUID
	// Replayed is true when an earlier request with the same Idempotency-Key made the
	// transition and this one only read the payment back.
	Replayed bool
}

// Transition captures, refunds or cancels a payment: it updates the payment and inserts
// the transition's event into the outbox in one transaction, through outbox.Insert like
// Create. It never talks to Kafka.
//
// The payment's row is locked first (SELECT ... FOR UPDATE), so transitions of one
// payment run one after the other: of a capture and a cancel sent at once, the first to
// take the lock wins and the second then finds the payment captured (or cancelled) and
// gets a Conflict naming that state, having written nothing. With an idempotency key, a
// repeat of the same request replays (Replayed, nothing written) and the same key with
// another request is Unprocessable; keys are per payment and action (ADR 0006). A repeat
// while the first request is still in flight is InFlight (claimKey in idempotency.go).
func (s *Store) Transition(ctx context.Context, req TransitionRequest, idempotencyKey string) (Transitioned, error) {
	ctx, cancel := context.WithTimeout(ctx, transactionTimeout)
	defer cancel()
	eventID, err := uuid.NewV7()
	if err != nil {
		return Transitioned{}, fmt.Errorf("new event id: %w", err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Transitioned{}, translate(fmt.Errorf("begin transaction: %w", err))
	}
	defer tx.Rollback(ctx) //nolint:errcheck // as in Create: a no-op after Commit

	// Before the row lock: a repeat of a request still in flight is InFlight at once,
	// while requests with other keys (or none) wait for the lock as before.
	if idempotencyKey != "" {
		if err := claimKey(ctx, tx, req.Action, req.MerchantID.String()+"/"+req.PaymentID.String(), idempotencyKey); err != nil {
			return Transitioned{}, err
		}
	}
	// Another merchant's payment is NotFound, as in Get, and is not even locked.
	p, err := scanPayment(tx.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE id = $1 AND merchant_id = $2 FOR UPDATE`,
		req.PaymentID, req.MerchantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Transitioned{}, Errorf(NotFound, "id", "no payment with id %s", req.PaymentID)
	}
	if err != nil {
		return Transitioned{}, translate(fmt.Errorf("lock payment %s: %w", req.PaymentID, err))
	}
	hash := transitionHash(req)
	if idempotencyKey != "" {
		replayed, found, err := replayTransition(ctx, tx, p, req.Action, idempotencyKey, hash)
		if found || err != nil {
			return replayed, err
		}
	}
	t, err := next(p, req, time.Now().UTC().Truncate(time.Microsecond))
	if err != nil {
		return Transitioned{}, err
	}
	msg, err := transitionMessage(t, eventID)
	if err != nil {
		return Transitioned{}, err
	}
	after := t.After
	if _, err := tx.Exec(ctx, `
		UPDATE payments SET status = $2, version = $3, refunded_amount = $4, updated_at = $5
		WHERE id = $1`,
		after.ID, after.Status, after.Version, after.RefundedAmount, after.UpdatedAt); err != nil {
		return Transitioned{}, translate(fmt.Errorf("update payment: %w", err))
	}
	if t.Refunded > 0 {
		if _, err := tx.Exec(ctx, `
			INSERT INTO refunds (id, payment_id, amount, sequence, created_at) VALUES ($1, $2, $3, $4, $5)`,
			msg.refundID, after.ID, t.Refunded, after.Version, after.UpdatedAt); err != nil {
			return Transitioned{}, translate(fmt.Errorf("insert refund: %w", err))
		}
	}
	if idempotencyKey != "" {
		if _, err := tx.Exec(ctx, `
			INSERT INTO transition_keys (payment_id, action, key, request_hash, sequence, event_id)
			VALUES ($1, $2, $3, $4, $5, $6)`,
			after.ID, req.Action, idempotencyKey, hash, after.Version, eventID); err != nil {
			return Transitioned{}, translate(fmt.Errorf("insert idempotency key: %w", err))
		}
	}
	if err := outbox.Insert(ctx, tx, msg.Message); err != nil {
		return Transitioned{}, translate(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Transitioned{}, translate(fmt.Errorf("commit %s: %w", req.Action, err))
	}
	return Transitioned{Payment: after, EventID: eventID}, nil
}

// replayTransition looks up an Idempotency-Key of action on the locked payment p. found
// is false when the key is new.
func replayTransition(ctx context.Context, tx pgx.Tx, p Payment, action, key string, hash []byte) (res Transitioned, found bool, err error) {
	var storedHash []byte
	var eventID uuid.UUID
	err = tx.QueryRow(ctx, `
		SELECT request_hash, event_id FROM transition_keys
		WHERE payment_id = $1 AND action = $2 AND key = $3`,
		p.ID, action, key).Scan(&storedHash, &eventID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Transitioned{}, false, nil
	}
	if err != nil {
		return Transitioned{}, true, translate(fmt.Errorf("read idempotency key: %w", err))
	}
	if !bytes.Equal(hash, storedHash) {
		return Transitioned{}, true, Errorf(Unprocessable, "Idempotency-Key",
			"this Idempotency-Key was already used for a different %s of this payment; use a new key for a new request", action)
	}
	return Transitioned{Payment: p, EventID: eventID, Replayed: true}, true, nil
}

// A transitionMsg is a transition's outbox message and, for a refund, the refund's id.
type transitionMsg struct {
	outbox.Message
	refundID uuid.UUID
}

// transitionMessage builds the event of t: its type, versioned payload and sequence.
func transitionMessage(t Transition, eventID uuid.UUID) (transitionMsg, error) {
	p := t.After
	at := *p.UpdatedAt
	msg := transitionMsg{Message: outbox.Message{ID: eventID, AggregateID: p.ID.String(), OccurredAt: at}}
	var payload any
	switch {
	case p.Status == StateCaptured:
		msg.Type = event.TypePaymentCaptured
		payload = event.PaymentCaptured{PaymentID: p.ID, Sequence: p.Version, UserID: p.UserID, Amount: p.Amount, Currency: p.Currency, CapturedAt: at}
	case p.Status == StateCancelled:
		msg.Type = event.TypePaymentCancelled
		payload = event.PaymentCancelled{PaymentID: p.ID, Sequence: p.Version, UserID: p.UserID, Amount: p.Amount, Currency: p.Currency, CancelledAt: at}
	default: // a refund, partial or full
		refundID, err := uuid.NewV7()
		if err != nil {
			return transitionMsg{}, fmt.Errorf("new refund id: %w", err)
		}
		msg.Type, msg.refundID = event.TypePaymentRefunded, refundID
		payload = event.PaymentRefunded{PaymentID: p.ID, Sequence: p.Version, RefundID: refundID, UserID: p.UserID,
			Amount: t.Refunded, Currency: p.Currency, RefundedTotal: p.RefundedAmount, RefundedAt: at}
	}
	var err error
	if msg.Payload, err = json.Marshal(payload); err != nil {
		return transitionMsg{}, fmt.Errorf("encode %s event: %w", msg.Type, err)
	}
	return msg, nil
}

// transitionHash fingerprints a transition request for its Idempotency-Key: the action
// and the amount asked for (0 for "all that is left"), not the raw body.
func transitionHash(req TransitionRequest) []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%d", req.Action, req.RefundAmount)
	return h.Sum(nil)
}
