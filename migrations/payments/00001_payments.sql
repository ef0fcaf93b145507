-- +goose Up

-- One row per accepted payment. Amounts are integers in the currency's minor unit
-- (cents), never floats.
CREATE TABLE payments (
    id         uuid        PRIMARY KEY,
    user_id    text        NOT NULL CHECK (length(user_id) BETWEEN 1 AND 64),
    amount     bigint      NOT NULL CHECK (amount > 0),
    currency   char(3)     NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    created_at timestamptz NOT NULL
);

-- Idempotency-Key records (module 2 of the course). A retry with the same key and the
-- same request body gets the original payment back; a different body is rejected.
-- The key row is inserted in the same transaction as the payment, so a key never
-- points at a payment that was rolled back.
CREATE TABLE idempotency_keys (
    key          text        PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 255),
    request_hash bytea       NOT NULL,
    payment_id   uuid        NOT NULL REFERENCES payments (id),
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE payments;
