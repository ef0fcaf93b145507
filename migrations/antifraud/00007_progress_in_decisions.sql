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
-- The three columns stay NULL while the last event applied is the creation (sequence 1,
-- PaymentCreated, event_id): the decision is inserted as it always was, without a byte more,
-- and only a payment's later events write them.
ALTER TABLE decisions
    -- The sequence of the last event of the payment the consumer applied, beyond 1.
    ADD COLUMN last_sequence integer CHECK (last_sequence > 1),
    -- The type of that event: the payment's state for the order check.
    ADD COLUMN state         text,
    -- The id of that event.
    ADD COLUMN last_event_id uuid,
    ADD CONSTRAINT decisions_progress_check
        CHECK ((last_sequence IS NULL) = (state IS NULL) AND (state IS NULL) = (last_event_id IS NULL));

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
SELECT payment_id, coalesce(last_sequence, 1), coalesce(state, 'PaymentCreated'), coalesce(last_event_id, event_id)
FROM decisions;
ALTER TABLE decisions DROP CONSTRAINT decisions_progress_check,
    DROP COLUMN last_event_id, DROP COLUMN state, DROP COLUMN last_sequence;
