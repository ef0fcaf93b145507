-- +goose Up

-- What the relay needs beyond the outbox table: the dead-letter queue and the wake-up
-- of other replicas.

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
