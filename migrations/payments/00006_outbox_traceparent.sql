-- +goose Up

-- The W3C traceparent of the transaction that wrote the event
-- (00-<trace id>-<span id>-<flags>, 55 characters), so that the relay's publish, which
-- runs later in another goroutine and maybe another process, continues the request's
-- trace. NULL when tracing is off or the writer traced nothing: the relay then sends
-- no traceparent header, and the event is published exactly as before.
ALTER TABLE outbox_events ADD COLUMN traceparent text;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN traceparent;
