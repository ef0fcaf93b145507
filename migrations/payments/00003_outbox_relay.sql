-- +goose Up

-- What the relay needs beyond the course's outbox columns.

-- Record-level rejections (the broker refused this record: too large, invalid) are
-- counted apart from attempts. attempts counts every failed publish, including broker
-- outages, and is shown to operators; only rejections decide the dead-letter queue, so
-- an outage of any length never dead-letters an event (docs/adr/0005).
ALTER TABLE outbox_events ADD COLUMN rejections integer NOT NULL DEFAULT 0;

-- The dead-letter queue: a table, not a Kafka topic, because the DLQ must work exactly
-- when Kafka is the problem (docs/adr/0005). The outbox row stays, with status 'failed',
-- and blocks later events of its aggregate until an operator replays it; this row is
-- the operator's inbox and its history.
CREATE TABLE outbox_dlq (
    event_id     uuid        PRIMARY KEY,
    event_type   text        NOT NULL,
    aggregate_id text        NOT NULL,
    payload      jsonb       NOT NULL,
    attempts     integer     NOT NULL,
    last_error   text        NOT NULL,
    failed_at    timestamptz NOT NULL DEFAULT now(),
    -- Set when an operator sends the event back to the outbox.
    replayed_at  timestamptz
);

-- Wake-up of relays in other API replicas. A statement-level trigger fires once per
-- INSERT statement and pg_notify is transactional: listeners hear about the rows only
-- when the inserting transaction commits, and outbox.Insert stays one statement.
-- +goose StatementBegin
CREATE FUNCTION outbox_events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_events', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_events_notify
    AFTER INSERT ON outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_events_notify();

-- +goose Down
DROP TRIGGER outbox_events_notify ON outbox_events;
DROP FUNCTION outbox_events_notify();
DROP TABLE outbox_dlq;
ALTER TABLE outbox_events DROP COLUMN rejections;
