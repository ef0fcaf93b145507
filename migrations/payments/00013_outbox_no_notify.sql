-- +goose Up

-- Relays find other replicas' commits by polling while idle (internal/outbox/poll,
-- pollIdle), not by NOTIFY: a transaction that notifies holds a lock on the
-- notification queue from its commit until the commit is flushed, so each committing
-- payment would wait for the one before it (docs/bench.md, the API benchmark).
DROP TRIGGER outbox_events_notify ON outbox_events;
DROP FUNCTION outbox_events_notify();

-- +goose Down
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
