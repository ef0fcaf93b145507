-- The antifraud consumer's tables. The names the chaos verifier reads (docs/contract.md,
-- "What make chaos needs"): decisions(payment_id, event_id), processed_events(deliveries),
-- user_totals(user_id, currency, payment_count, amount_total).

-- One row per event id, written in the same transaction as the decision and the totals.
-- deliveries counts every delivery, the first included.
CREATE TABLE IF NOT EXISTS processed_events (
    event_id     uuid        PRIMARY KEY,
    deliveries   integer     NOT NULL DEFAULT 1,
    processed_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS decisions (
    payment_id  uuid        PRIMARY KEY,
    event_id    uuid        NOT NULL,
    user_id     text        NOT NULL,
    amount      bigint      NOT NULL,
    currency    text        NOT NULL,
    decision    text        NOT NULL CHECK (decision IN ('approve', 'review', 'block')),
    reasons     text[]      NOT NULL,
    occurred_at timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS decisions_user_occurred_idx ON decisions (user_id, occurred_at);

CREATE TABLE IF NOT EXISTS user_totals (
    user_id       text    NOT NULL,
    currency      text    NOT NULL,
    payment_count bigint  NOT NULL,
    amount_total  numeric NOT NULL,
    PRIMARY KEY (user_id, currency)
);
