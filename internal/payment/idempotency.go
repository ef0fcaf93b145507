package payment

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dscourse/payments-outbox/internal/outbox"
)

// An Idempotency-Key is claimed for one transaction at a time by a transaction-level
// advisory lock on the key's scope (keyScope), taken without waiting: a client that
// retries on its own timeout while its first attempt still runs gets 409 and
// Retry-After at once, instead of a second connection held waiting, and never a second
// payment. Once the first transaction ends, the lock is free and its row (if it
// committed) is visible, so the retry replays it. Two scopes that share a 64-bit hash
// only ever make one of them wait.
//
// The claim is claimKeySQL, a statement that fails with lock_not_available when the key
// is in use (migrations/payments/00014): in a batch, a failed statement makes
// PostgreSQL skip every statement after it, so Create's batch writes nothing and waits
// for nothing when its key is in use.
const claimKeySQL = `SELECT claim_idempotency_key($1)`

// keyScope is the text whose hash is the advisory lock of an Idempotency-Key: the
// endpoint, then the merchant or the payment, then the key. Length-prefixed parts: no
// two scopes share a text.
func keyScope(endpoint, owner, key string) string {
	return fmt.Sprintf("%d:%s|%d:%s|%s", len(endpoint), endpoint, len(owner), owner, key)
}

// claimKey makes tx the one user of an Idempotency-Key until it ends, or returns
// InFlight when another transaction uses it now.
func claimKey(ctx context.Context, tx pgx.Tx, endpoint, owner, key string) error {
	_, err := tx.Exec(ctx, claimKeySQL, keyScope(endpoint, owner, key))
	return claimError("claim idempotency key", err)
}

// claimError is the error of what, which began with a claim: InFlight if the key is in
// use, else what translate makes of err.
func claimError(what string, err error) error {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "55P03" {
		return Errorf(InFlight, "Idempotency-Key",
			"a request with this Idempotency-Key is still in progress; retry after Retry-After with the same key to get its answer")
	}
	if err != nil {
		return translate(fmt.Errorf("%s: %w", what, err))
	}
	return nil
}

// createBatch is the transaction of Store.Create but its COMMIT, as one batch: BEGIN,
// the claim of the Idempotency-Key (if any), the payment, the key's record, the outbox
// event. Every statement is sent before any answer arrives, so none can depend on an
// earlier one's answer in Go: a claim that fails ends the batch (claimKeySQL); the
// payment goes before the key because the key's row references it; the event is
// inserted whatever the key's record found, since a transaction that must not commit
// is rolled back whole. recorded is set when the batch's results are closed: false if
// an earlier request committed the key.
func createBatch(ctx context.Context, merchantID uuid.UUID, p Payment, msg outbox.Message, idempotencyKey string, hash []byte) (b *pgx.Batch, recorded *bool) {
	recorded = new(bool)
	*recorded = true // without a key, nothing to record
	// The ids as the [16]byte they are, which pgx sends in binary; a uuid.UUID would go
	// through its text form (internal/pguuid says what that costs).
	paymentID, merchant := [16]byte(p.ID), [16]byte(merchantID)
	b = &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	if idempotencyKey != "" {
		b.Queue(claimKeySQL, keyScope("create", merchantID.String(), idempotencyKey))
	}
	b.Queue(`
		INSERT INTO payments (id, user_id, amount, currency, created_at, merchant_id)
		VALUES ($1, $2, $3, $4, $5, $6)`,
		paymentID, p.UserID, p.Amount, p.Currency, p.CreatedAt, merchant)
	if idempotencyKey != "" {
		b.Queue(`
			INSERT INTO idempotency_keys (merchant_id, key, request_hash, payment_id)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (merchant_id, key) DO NOTHING`,
			merchant, idempotencyKey, hash, paymentID).
			Exec(func(tag pgconn.CommandTag) error { *recorded = tag.RowsAffected() == 1; return nil })
	}
	outbox.QueueInsert(ctx, b, msg)
	return b, recorded
}
