-- +goose Up
-- A payment's progress lives in its decision row (docs/bench.md, "The consumer": every row
-- and index entry written per event is PostgreSQL's work, and the consumer is bound by it).
-- payment_progress (00004) was one more row and primary-key entry per payment, written for
-- every applied event, next to the decision that is one row per payment already, keyed by
-- the same payment_id and written in the same transaction as the payment's creation.
--
-- The decision row is also the payment's lock: the order check reads these columns with
-- SELECT ... FOR UPDATE (internal/antifraud/order.go), so a consumer taking over a partition
-- in a rebalance waits for the one still at work on the payment, and then reads what it
-- committed. A payment with no decision has applied nothing, not even its PaymentCreated.
ALTER TABLE decisions
    -- The sequence of the last event of the payment the consumer applied: 1 is its creation.
    ADD COLUMN last_sequence integer NOT NULL DEFAULT 1 CHECK (last_sequence >= 1),
    -- The type of that event, the payment's state for the order check.
    ADD COLUMN state         text    NOT NULL DEFAULT 'PaymentCreated',
    -- The id of that event; NULL while it is the creation, whose id is event_id.
    ADD COLUMN last_event_id uuid;

UPDATE decisions d
SET last_sequence = p.last_sequence, state = p.state, last_event_id = p.last_event_id
FROM payment_progress p
WHERE p.payment_id = d.payment_id AND p.last_sequence > 1;

DROP TABLE payment_progress;

-- +goose Down
CREATE TABLE payment_progress (
    payment_id    uuid        PRIMARY KEY,
    last_sequence integer     NOT NULL CHECK (last_sequence >= 1),
    state         text        NOT NULL,
    last_event_id uuid        NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
INSERT INTO payment_progress (payment_id, last_sequence, state, last_event_id)
SELECT payment_id, last_sequence, state, coalesce(last_event_id, event_id) FROM decisions;
ALTER TABLE decisions DROP COLUMN last_event_id, DROP COLUMN state, DROP COLUMN last_sequence;
