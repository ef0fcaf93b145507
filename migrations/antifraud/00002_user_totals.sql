-- +goose Up

-- Per-user running totals, per currency: how many payments the user made and for how much,
-- as a fraud service keeps them to judge an account's volume (rules.go's total rule reads
-- them). It exists for two reasons:
--
-- 1. It is the consumer's effect that is NOT idempotent on purpose. Each first-time event
--    adds its payment with `payment_count = payment_count + n, amount_total = amount_total
--    + ...`; applying the same event twice counts it twice. Nothing in this table can tell
--    a redelivery from a new payment: only the dedup row in processed_events, inserted in
--    the same transaction, keeps the totals exact. That is the lesson of the module
--    (dedup on X-Event-Id turns at-least-once delivery into exactly-once effects), and the
--    chaos verifier checks it by comparing these rows with the totals computed from the
--    committed payments. decisions cannot show it: its primary key absorbs a redelivery
--    whatever the consumer does.
-- 2. Rules that look at a user's whole history read one row instead of every decision.
CREATE TABLE user_totals (
    user_id       text    NOT NULL,
    currency      text    NOT NULL,
    -- Payments of the user in this currency that the consumer has processed.
    payment_count bigint  NOT NULL CHECK (payment_count >= 1),
    -- Their amounts added up, in minor units. numeric rather than bigint: each amount fits
    -- in 64 bits, their sum may not, and an overflow would fail every batch that contains
    -- the user's next payment, stalling the partition.
    amount_total  numeric NOT NULL CHECK (amount_total >= 0),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, currency)
);

-- +goose Down
DROP TABLE user_totals;
