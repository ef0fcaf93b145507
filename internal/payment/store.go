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
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/outbox"
	"github.com/dscourse/payments-outbox/internal/tracing"
)

// transactionTimeout bounds each call to the database, so a stalled database turns
// into a prompt 503 (Unavailable) instead of requests piling up until clients give up.
const transactionTimeout = 5 * time.Second

// A Store keeps payments in PostgreSQL. Its methods return *Error for what the client
// can act on (not found, reused Idempotency-Key, database unavailable); driver errors
// are translated here and nowhere else.
type Store struct {
	pool   *pgxpool.Pool
	tracer trace.Tracer
}

// NewTracedStore returns a Store on pool with a span for each Create transaction, from
// tp (nil: none). The pool's database must have the payments migrations applied.
func NewTracedStore(pool *pgxpool.Pool, tp trace.TracerProvider) *Store {
	return &Store{pool: pool, tracer: tracing.OrNone(tp).Tracer("github.com/dscourse/payments-outbox/internal/payment")}
}

// Create writes a payment and its PaymentCreated outbox event in one transaction:
// both commit or neither does. It never talks to Kafka.
//
// With an idempotency key (the merchant's: keys are per merchant and endpoint), the
// key is recorded in the same transaction. A retry with the same key and the same
// request reads back the original payment (Replayed is true) and writes nothing; the
// same key with a different request is Unprocessable. A request whose key another
// request is still using is InFlight (409, Retry-After), at once and having written
// nothing: the first holds the key (idempotency.go) until its transaction ends.
//
// The transaction takes two round trips to the database: one batch that begins it and
// sends every write (createBatch), then COMMIT, or ROLLBACK when the batch's answers
// say the key is taken. Sent one by one, the same statements would take six.
//
// The transaction has a span of its own, whose traceparent outbox.QueueInsert stores
// with the event: the relay's publish continues the trace from here.
func (s *Store) Create(ctx context.Context, merchantID uuid.UUID, req CreateRequest, idempotencyKey string) (created Created, err error) {
	ctx, span := s.tracer.Start(ctx, "payment create transaction")
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "payment not created")
		}
		span.End()
	}()
	ctx, cancel := context.WithTimeout(ctx, transactionTimeout)
	defer cancel()
	p, err := NewPayment(req, time.Now())
	if err != nil {
		return Created{}, err
	}
	eventID, err := uuid.NewV7()
	if err != nil {
		return Created{}, fmt.Errorf("new event id: %w", err)
	}
	payload, err := json.Marshal(NewPaymentCreated(p))
	if err != nil {
		return Created{}, fmt.Errorf("encode %s event: %w", event.TypePaymentCreated, err)
	}
	msg := outbox.Message{
		ID:          eventID,
		Type:        event.TypePaymentCreated,
		AggregateID: p.ID.String(),
		Payload:     payload,
		OccurredAt:  p.CreatedAt,
	}

	var hash []byte
	if idempotencyKey != "" {
		hash = requestHash(req)
	}
	b, recorded := createBatch(ctx, merchantID, p, msg, idempotencyKey, hash)
	results := s.pool.SendBatch(ctx, b)
	tx := results.Tx()
	// After a successful Commit this is a no-op; on every other path it ends the
	// transaction, so a failed outbox insert leaves no payment behind. If ctx is
	// already done, pgx closes the connection instead, and the server rolls back.
	defer tx.Rollback(ctx) //nolint:errcheck // the error that matters is returned below
	if err := results.Close(); err != nil {
		// The claim's failure (in flight) or another statement's, which translate sorts.
		return Created{}, claimError("insert payment and its event", err)
	}
	if !*recorded {
		// An earlier request committed this key: undo this one's writes, replay that one.
		if err := tx.Rollback(ctx); err != nil {
			return Created{}, translate(fmt.Errorf("roll back duplicate request: %w", err))
		}
		return s.replay(ctx, merchantID, idempotencyKey, hash)
	}

	// If the connection drops during COMMIT, the outcome is unknown: the client gets
	// Unavailable and retries with the same Idempotency-Key, which is safe either way.
	if err := tx.Commit(ctx); err != nil {
		return Created{}, translate(fmt.Errorf("commit payment: %w", err))
	}
	return Created{Payment: p, EventID: eventID}, nil
}

// replay answers a request whose Idempotency-Key is already taken; hash is the
// request's requestHash.
func (s *Store) replay(ctx context.Context, merchantID uuid.UUID, idempotencyKey string, hash []byte) (Created, error) {
	var (
		storedHash []byte
		paymentID  uuid.UUID
	)
	err := s.pool.QueryRow(ctx, `
		SELECT request_hash, payment_id FROM idempotency_keys WHERE merchant_id = $1 AND key = $2`,
		merchantID, idempotencyKey).Scan(&storedHash, &paymentID)
	if err != nil {
		return Created{}, translate(fmt.Errorf("read idempotency key: %w", err))
	}
	if !bytes.Equal(hash, storedHash) {
		return Created{}, Errorf(Unprocessable, "Idempotency-Key",
			"this Idempotency-Key was already used with a different request; use a new key for a new payment")
	}
	p, events, err := s.Get(ctx, merchantID, paymentID)
	if err != nil {
		return Created{}, err
	}
	c := Created{Payment: p, Replayed: true}
	if created := CreatedEvent(events); created != nil {
		c.EventID = created.ID
	}
	return c, nil
}

// paymentColumns are the columns of a Payment, in scanPayment's order.
const paymentColumns = `id, user_id, amount, currency, created_at, status, version, refunded_amount, updated_at`

// scanPayment reads paymentColumns into a Payment, times in UTC.
func scanPayment(row pgx.Row) (Payment, error) {
	var p Payment
	err := row.Scan(&p.ID, &p.UserID, &p.Amount, &p.Currency, &p.CreatedAt, &p.Status, &p.Version, &p.RefundedAmount, &p.UpdatedAt)
	p.CreatedAt = p.CreatedAt.UTC()
	if p.UpdatedAt != nil {
		utc := p.UpdatedAt.UTC()
		p.UpdatedAt = &utc
	}
	return p, err
}

// Get returns a payment of merchantID and the delivery state of its events, oldest
// first. An event whose published outbox row was cleaned up is no longer listed. An
// unknown id, and the id of another merchant's payment, are NotFound alike: a merchant
// cannot even learn that the payment exists.
func (s *Store) Get(ctx context.Context, merchantID, id uuid.UUID) (Payment, []EventDelivery, error) {
	ctx, cancel := context.WithTimeout(ctx, transactionTimeout)
	defer cancel()
	p, err := scanPayment(s.pool.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE id = $1 AND merchant_id = $2`, id, merchantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, nil, Errorf(NotFound, "id", "no payment with id %s", id)
	}
	if err != nil {
		return Payment{}, nil, translate(fmt.Errorf("select payment %s: %w", id, err))
	}
	// The payment and its events are read in two statements, not one snapshot: an event
	// committed in between shows with the payment's older version, which a client sees
	// as "one more event than the version says" and nothing worse. An event is in
	// outbox_events until it is published, then in outbox_published until the cleaner
	// deletes it; one statement reads both tables in one snapshot, so an event moved
	// meanwhile shows once. The sequence is the payload's; PaymentCreated v1 has none
	// and is 1.
	rows, _ := s.pool.Query(ctx, `
		SELECT id, event_type, coalesce((payload->>'sequence')::int, $2), status, attempts,
		       NULL::timestamptz, last_error, seq
		FROM outbox_events
		WHERE aggregate_id = $1
		UNION ALL
		SELECT id, event_type, coalesce((payload->>'sequence')::int, $2), 'published', attempts,
		       published_at, NULL, seq
		FROM outbox_published
		WHERE aggregate_id = $1
		ORDER BY seq`,
		id.String(), event.CreatedSequence) // error via CollectRows
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventDelivery, error) {
		var e EventDelivery
		var seq int64
		err := row.Scan(&e.ID, &e.Type, &e.Sequence, &e.Status, &e.Attempts, &e.PublishedAt, &e.LastError, &seq)
		if e.PublishedAt != nil {
			utc := e.PublishedAt.UTC()
			e.PublishedAt = &utc
		}
		return e, err
	})
	if err != nil {
		return Payment{}, nil, translate(fmt.Errorf("select events of payment %s: %w", id, err))
	}
	return p, events, nil
}

// CreatedEvent returns the PaymentCreated event among events, or nil.
func CreatedEvent(events []EventDelivery) *EventDelivery {
	for i := range events {
		if events[i].Type == event.TypePaymentCreated {
			return &events[i]
		}
	}
	return nil
}

// requestHash fingerprints a request for the Idempotency-Key check. It hashes the
// validated fields, not the raw body, so that a retry that only reorders the JSON keys
// or changes whitespace still counts as the same request.
func requestHash(req CreateRequest) []byte {
	h := sha256.New()
	// Length-prefixed fields: no two different requests share an encoding.
	fmt.Fprintf(h, "%d:%s|", len(req.UserID), req.UserID)
	fmt.Fprintf(h, "%d|%s", req.Amount, req.Currency)
	return h.Sum(nil)
}
