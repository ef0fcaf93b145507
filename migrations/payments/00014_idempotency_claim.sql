-- +goose Up

-- The claim of an Idempotency-Key for one transaction (internal/payment,
-- idempotency.go) as a statement that fails when the key is in use: the API sends its
-- payment's transaction as one batch, and a failed statement makes PostgreSQL skip the
-- rest of the batch, so that a request whose key is in use writes nothing and waits for
-- nothing. 55P03 (lock_not_available) is the code of a lock taken with NOWAIT.
-- +goose StatementBegin
CREATE FUNCTION claim_idempotency_key(scope text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended(scope, 0)) THEN
        RAISE EXCEPTION 'Idempotency-Key in use by another transaction' USING ERRCODE = '55P03';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION claim_idempotency_key(text);
