-- +goose Up
-- Merchants, the API's clients: every payment belongs to one, and a merchant sees and
-- changes only its own (another's payment is answered 404, as if it did not exist).
CREATE TABLE merchants (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 64),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The merchant of the payments written before merchants existed.
INSERT INTO merchants (id, name) VALUES ('00000000-0000-0000-0000-000000000001', 'default');

-- The default names that merchant for the existing rows and for the writers that know
-- no merchant (the dual-write teaching path, test fixtures); the API always sets it.
ALTER TABLE payments
    ADD COLUMN merchant_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001'
        REFERENCES merchants (id);

-- A merchant's API keys. Only the SHA-256 of a key is kept: the key itself is shown
-- once, by `api keys create`. A key has 130 random bits, so a fast hash is enough: a
-- slow one (bcrypt, argon2) makes guessing a low-entropy password expensive, and no one
-- can enumerate 2^130 keys however fast the hash; it would only slow every request.
CREATE TABLE api_keys (
    id          uuid        PRIMARY KEY,
    merchant_id uuid        NOT NULL REFERENCES merchants (id),
    key_hash    bytea       NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- Set by `api keys revoke`: the key stops working at once and stays for the record.
    revoked_at  timestamptz
);

-- +goose Down
DROP TABLE api_keys;
ALTER TABLE payments DROP COLUMN merchant_id;
DROP TABLE merchants;
