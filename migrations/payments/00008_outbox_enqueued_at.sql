-- +goose Up

-- When the row was written, on the database's clock. created_at is when the event
-- occurred, on the API host's clock (it is the X-Event-Occurred-At header), and the
-- relay runs on other hosts again: an age computed across two clocks is off by their
-- skew, so an API host an hour behind would raise the outage alert for an event written
-- a moment ago. The oldest pending age is now() - enqueued_at, both read by the
-- database. now() is stable, so adding the column rewrites nothing; rows written
-- before it get the migration's time.
ALTER TABLE outbox_events ADD COLUMN enqueued_at timestamptz NOT NULL DEFAULT now();

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN enqueued_at;
