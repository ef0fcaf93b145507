-- The payments service's tables. The names the chaos verifier reads (docs/contract.md,
-- "What make chaos needs"): payments(id), outbox_events(status), outbox_dlq.

CREATE TABLE IF NOT EXISTS payments (
    id         uuid        PRIMARY KEY,
    user_id    text        NOT NULL,
    amount     bigint      NOT NULL CHECK (amount > 0),
    currency   text        NOT NULL,
    created_at timestamptz NOT NULL
);

-- "The same request" is the same user_id, amount and currency: the three columns are
-- compared, not the bytes of the body.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key        text        PRIMARY KEY,
    user_id    text        NOT NULL,
    amount     bigint      NOT NULL,
    currency   text        NOT NULL,
    payment_id uuid        NOT NULL REFERENCES payments (id),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS outbox_events (
    id               uuid        PRIMARY KEY,  -- the X-Event-Id, minted once
    seq              bigint      GENERATED ALWAYS AS IDENTITY,
    aggregate_id     text        NOT NULL,     -- the record key: the payment id
    event_type       text        NOT NULL,
    payload          text        NOT NULL,     -- the record value, byte for byte
    occurred_at      text        NOT NULL,     -- the X-Event-Occurred-At header
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'published', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    rejections       integer     NOT NULL DEFAULT 0,
    last_error       text,
    published_at     timestamptz,
    lease_token      uuid,
    lease_expires_at timestamptz
);

CREATE INDEX IF NOT EXISTS outbox_events_pending_idx ON outbox_events (seq) WHERE status = 'pending';

CREATE TABLE IF NOT EXISTS outbox_dlq (
    event_id   uuid        PRIMARY KEY,
    payload    text        NOT NULL,
    last_error text        NOT NULL,
    failed_at  timestamptz NOT NULL DEFAULT now()
);
