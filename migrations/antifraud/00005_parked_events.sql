-- +goose Up
-- Events that arrived before an earlier event of their payment (internal/antifraud/park.go).
-- The relay keeps each payment's order, but an event sent back from the relay's DLQ can reach
-- the topic after its successor. Such an event is parked here, with the record it came in,
-- and gets NO processed_events row: a dedup row stands only for an effect that was applied.
-- When its predecessor is applied, the consumer applies it in the same transaction and
-- deletes it from here. A row that stays is a predecessor that never came: the gauge
-- antifraud_parked_events counts them, and AntifraudEventsParked fires after 30 minutes.
CREATE TABLE parked_events (
    event_id   uuid        PRIMARY KEY,
    payment_id uuid        NOT NULL,
    sequence   integer     NOT NULL,
    topic      text        NOT NULL,
    partition  integer     NOT NULL,
    "offset"   bigint      NOT NULL,
    key        bytea,
    value      bytea       NOT NULL,
    -- The record's headers, as the JSON array park.go writes (keys and values base64).
    headers    jsonb       NOT NULL,
    parked_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX parked_events_payment_idx ON parked_events (payment_id, sequence);

-- +goose Down
DROP TABLE parked_events;
