-- +goose Up

-- When the row was written, on the database's clock. created_at is when the event
-- occurred, on the API host's clock (it is the X-Event-Occurred-At header), and the
-- relay runs on other hosts again: an age computed across two clocks is off by their
-- skew, so an API host an hour behind would raise the outage alert for an event written
-- a moment ago. The oldest pending age is now() - enqueued_at, both read by the
-- database. now() is stable, so adding the column rewrites nothing; rows written
-- before it get the migration's time.
ALTER TABLE outbox_events ADD COLUMN enqueued_at timestamptz NOT NULL DEFAULT now();

-- The pending index carries enqueued_at instead of created_at (00004), so that the
-- count and the oldest age stay an index-only scan of the pending rows.
DROP INDEX outbox_events_pending_idx;
CREATE INDEX outbox_events_pending_idx ON outbox_events (next_attempt_at, seq) INCLUDE (enqueued_at)
    WHERE status = 'pending';

-- +goose Down
DROP INDEX outbox_events_pending_idx;
CREATE INDEX outbox_events_pending_idx ON outbox_events (next_attempt_at, seq) INCLUDE (created_at)
    WHERE status = 'pending';
ALTER TABLE outbox_events DROP COLUMN enqueued_at;
