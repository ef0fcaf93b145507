-- +goose Up
-- A payment's later events (docs/adr/0006-payment-lifecycle.md): the consumer applies the
-- events of one payment in their sequence and refuses, records and counts any that does not
-- follow the last one it applied.

-- Where each payment is in its lifecycle, as far as the consumer has applied it. The next
-- event of the payment must carry last_sequence + 1, and be a transition the state allows.
CREATE TABLE payment_progress (
    payment_id    uuid        PRIMARY KEY,
    last_sequence integer     NOT NULL CHECK (last_sequence >= 1),
    state         text        NOT NULL,
    last_event_id uuid        NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Events that did not follow their payment's last applied one: out of order, with a
-- predecessor missing, or a transition the state does not allow. They must never happen
-- (the relay keeps each payment's order); when one does, it is kept here with what the
-- consumer knew, counted in antifraud_order_violations_total, and its effect is NOT applied.
CREATE TABLE order_violations (
    event_id      uuid        PRIMARY KEY,
    payment_id    uuid        NOT NULL,
    event_type    text        NOT NULL,
    sequence      integer     NOT NULL,
    -- What the consumer had applied of the payment when the event came; 0 and '' when
    -- nothing (not even its PaymentCreated).
    last_sequence integer     NOT NULL,
    last_state    text        NOT NULL,
    -- missing_predecessor, out_of_order or invalid_transition (internal/antifraud/order.go).
    reason        text        NOT NULL,
    topic         text        NOT NULL,
    partition     integer     NOT NULL,
    "offset"      bigint      NOT NULL,
    detected_at   timestamptz NOT NULL DEFAULT now()
);

-- The dedup rows say which event of its payment each was, and in which order the consumer
-- took them: the chaos verifier checks that order per payment as it checks the topic's.
-- processed_order follows the batch's order (insertProcessed inserts WITH ORDINALITY).
ALTER TABLE processed_events
    ADD COLUMN event_type      text,
    ADD COLUMN sequence        integer,
    ADD COLUMN processed_order bigint GENERATED ALWAYS AS IDENTITY;

-- A cancelled payment leaves its user's totals: a user whose only payment was cancelled
-- has a count of 0 (00002 required at least 1).
ALTER TABLE user_totals DROP CONSTRAINT user_totals_payment_count_check,
    ADD CONSTRAINT user_totals_payment_count_check CHECK (payment_count >= 0);

-- +goose Down
ALTER TABLE user_totals DROP CONSTRAINT user_totals_payment_count_check,
    ADD CONSTRAINT user_totals_payment_count_check CHECK (payment_count >= 1);
ALTER TABLE processed_events DROP COLUMN processed_order, DROP COLUMN sequence, DROP COLUMN event_type;
DROP TABLE order_violations;
DROP TABLE payment_progress;
