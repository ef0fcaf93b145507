-- +goose Up

-- Less WAL per event, second step (docs/bench.md: the SQL ladder's `first_design` rung
-- against `ours`). Up to this migration, marking an event published UPDATEs its row: a
-- new version of the whole row (payload included) and a new entry in the primary key and
-- in the aggregate index, for every event, on a table kept half empty (fillfactor 50) so
-- that the lease's own UPDATE can stay HOT. From here on the relay holds its claim as
-- row locks in one transaction (ADR 0002) and marks an event by moving it: DELETE from
-- outbox_events, INSERT into outbox_published, in that transaction. A delete writes no
-- index entry, and the history below is append-only with two small indexes.
-- outbox_events keeps only the events still to publish (pending) and the dead-lettered
-- ones (failed): it stays as small as the backlog, and so do its indexes and the claim's
-- order check.

-- Published events, kept for GET /payments/{id} and for operators, deleted by the
-- cleaner after the retention (30 days by default). Written once, never updated.
CREATE TABLE outbox_published (
    -- The event id (X-Event-Id). Not a primary key: it was unique in outbox_events
    -- when the event was written, and an index here would be one more entry per event
    -- that only an operator's lookup by id would read.
    id           uuid        NOT NULL,
    seq          bigint      NOT NULL,
    event_type   text        NOT NULL,
    aggregate_id text        NOT NULL,
    payload      jsonb       NOT NULL,
    -- Failed publishes before the one that succeeded, and how many of them were
    -- rejections of the record (ADR 0005).
    attempts     integer     NOT NULL,
    rejections   integer     NOT NULL,
    created_at   timestamptz NOT NULL,
    -- The writer's trace context (00006), so that an operator finds an event's trace.
    traceparent  text,
    published_at timestamptz NOT NULL DEFAULT now()
);

-- GET /payments/{id}: the payment's published events.
CREATE INDEX outbox_published_aggregate_idx ON outbox_published (aggregate_id);

-- Cleanup by age. Rows arrive in published_at order, so a BRIN index (one summary per
-- range of pages) finds the old ones at almost no cost per insert.
CREATE INDEX outbox_published_published_at_idx ON outbox_published USING brin (published_at)
    WITH (autosummarize = on);

INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent, published_at)
SELECT id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent, published_at
FROM outbox_events WHERE status = 'published';
DELETE FROM outbox_events WHERE status = 'published';

-- The lease is the claiming transaction's row locks now; its columns go, and so does
-- published_at (with the CHECK that tied it to the status, dropped with the column).
DROP INDEX outbox_events_published_at_idx;
ALTER TABLE outbox_events
    DROP COLUMN published_at,
    DROP COLUMN lease_token,
    DROP COLUMN lease_expires_at,
    DROP CONSTRAINT outbox_events_status_check,
    ADD CONSTRAINT outbox_events_status_check CHECK (status IN ('pending', 'failed'));

-- Rows are inserted once and deleted once; only a failed publish updates one. Full
-- pages are the right layout for that (00004 left half of each page free for the
-- lease's HOT updates). New pages only, as for any fillfactor change.
ALTER TABLE outbox_events SET (fillfactor = 100);

-- +goose Down
ALTER TABLE outbox_events SET (fillfactor = 50);
ALTER TABLE outbox_events
    DROP CONSTRAINT outbox_events_status_check,
    ADD CONSTRAINT outbox_events_status_check CHECK (status IN ('pending', 'published', 'failed')),
    ADD COLUMN published_at timestamptz,
    ADD COLUMN lease_token uuid,
    ADD COLUMN lease_expires_at timestamptz,
    ADD CHECK ((status = 'published') = (published_at IS NOT NULL));
INSERT INTO outbox_events (id, event_type, aggregate_id, payload, status, attempts, rejections, created_at, traceparent, published_at)
SELECT id, event_type, aggregate_id, payload, 'published', attempts, rejections, created_at, traceparent, published_at
FROM outbox_published;
CREATE INDEX outbox_events_published_at_idx ON outbox_events USING brin (published_at)
    WITH (autosummarize = on) WHERE status = 'published';
DROP TABLE outbox_published;
