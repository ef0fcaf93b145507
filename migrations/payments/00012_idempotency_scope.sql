-- +goose Up
-- Idempotency-Keys as clients expect them (the IETF Idempotency-Key draft): a key is
-- the client's, so it is scoped per merchant and endpoint, and it is kept 24 hours
-- (IDEMPOTENCY_KEY_RETENTION), then deleted by the API's key cleaner. Two merchants
-- that pick the same key no longer collide. Keys of transitions (transition_keys) are
-- already per payment, hence per merchant, and per action.
ALTER TABLE idempotency_keys ADD COLUMN merchant_id uuid REFERENCES merchants (id);
UPDATE idempotency_keys k SET merchant_id = p.merchant_id FROM payments p WHERE p.id = k.payment_id;
ALTER TABLE idempotency_keys ALTER COLUMN merchant_id SET NOT NULL;
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
ALTER TABLE idempotency_keys ADD PRIMARY KEY (merchant_id, key);

-- The cleaner deletes by age.
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
CREATE INDEX transition_keys_created_at ON transition_keys (created_at);

-- +goose Down
DROP INDEX transition_keys_created_at;
DROP INDEX idempotency_keys_created_at;
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
ALTER TABLE idempotency_keys ADD PRIMARY KEY (key);
ALTER TABLE idempotency_keys DROP COLUMN merchant_id;
