-- +goose Up
-- A payment's lifecycle (docs/adr/0006-payment-lifecycle.md): created, then captured and
-- refunded (in parts or in full), or cancelled. Each transition updates this row and
-- inserts its event into outbox_events in the same transaction.
ALTER TABLE payments
    -- One of the five states of ADR 0006; the API alone decides which transitions are
    -- allowed, the CHECK only keeps out values that are no state at all.
    ADD COLUMN status text NOT NULL DEFAULT 'created'
        CHECK (status IN ('created', 'captured', 'partially_refunded', 'refunded', 'cancelled')),
    -- The number of the payment's last transition: 1 after the creation, +1 per capture,
    -- refund or cancellation. Each event carries its transition's number as "sequence", so
    -- that a consumer can tell a missing or out-of-order event from the next one.
    ADD COLUMN version integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    -- The sum of the payment's refunds, in minor units. Never above the amount: the API
    -- checks it under the row lock, the CHECK is the last line of defence.
    ADD COLUMN refunded_amount bigint NOT NULL DEFAULT 0
        CHECK (refunded_amount >= 0 AND refunded_amount <= amount),
    -- When the payment last changed state; NULL until its first transition after creation.
    ADD COLUMN updated_at timestamptz;

-- One row per refund: its id is in the PaymentRefunded event, so two refunds of the same
-- amount stay two refunds for anyone downstream.
CREATE TABLE refunds (
    id         uuid        PRIMARY KEY,
    payment_id uuid        NOT NULL REFERENCES payments (id),
    amount     bigint      NOT NULL CHECK (amount > 0),
    -- The payment's version this refund made: its event's sequence.
    sequence   integer     NOT NULL,
    created_at timestamptz NOT NULL,
    UNIQUE (payment_id, sequence)
);

-- Idempotency-Keys of transitions, per payment and endpoint (ADR 0006): one key may be
-- used once for a capture and once for a refund of the same payment without clashing,
-- and never clashes with the keys of POST /payments (idempotency_keys).
CREATE TABLE transition_keys (
    payment_id   uuid        NOT NULL REFERENCES payments (id),
    -- capture, refund or cancel.
    action       text        NOT NULL,
    key          text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    request_hash bytea       NOT NULL,
    -- The transition the key made: the payment's version after it, and its event.
    sequence     integer     NOT NULL,
    event_id     uuid        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (payment_id, action, key)
);

-- +goose Down
DROP TABLE transition_keys;
DROP TABLE refunds;
ALTER TABLE payments DROP COLUMN updated_at, DROP COLUMN refunded_amount, DROP COLUMN version, DROP COLUMN status;
