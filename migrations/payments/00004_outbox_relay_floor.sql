-- +goose Up

-- Less WAL per event, judged against the floor, the least a relay can do (docs/bench.md,
-- `go run ./cmd/bench relay`). On the schema of 00002 and 00003, at 100,000 events the
-- relay writes about 1,260 WAL bytes and 11 WAL records per published event, a minimal
-- relay on a minimal table 417 bytes and 3 records. The claim alone writes about 600
-- bytes per event: only about 40% of the leases are HOT updates, so the other 60% write
-- a new entry into every index.

-- The claim takes events in the order they became due, not in commit order (ADR 0005):
-- an event that failed for its partition goes to the back of the queue with its
-- backoff, and cannot hold the head while other partitions are healthy.
-- created_at is carried in the index so that the oldest pending age (the outage
-- alert) is read from the index alone, as it was from the old one.
DROP INDEX outbox_events_pending_idx;
CREATE INDEX outbox_events_pending_idx ON outbox_events (next_attempt_at, seq) INCLUDE (created_at)
    WHERE status = 'pending';

-- seq orders the events of one aggregate, and outbox_events_aggregate_idx serves that;
-- an identity column is unique by construction. Its unique index was one more entry
-- written by every insert and by every update that is not HOT, and read by nothing.
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_seq_key;

-- A lease is HOT only if the row's page has room for the new version. When a claim
-- leases every row of a page at once, as it does in a backlog, 30% of free space
-- holds new versions of less than half of them. Half of each page free made about
-- 90% of the leases HOT (the lease's WAL fell from about 600 to about 160 bytes per
-- event). New pages only: existing pages keep their layout until they are rewritten.
ALTER TABLE outbox_events SET (fillfactor = 50);

-- Cleanup reads published rows by age once a minute; the mark writes an entry into
-- this index for every published event. A BRIN index keeps one summary per range of
-- pages instead of one entry per row: the mark adds nothing to it as long as rows are
-- published in roughly the order they were inserted, which the relay does.
-- autosummarize summarizes each range of pages once inserts have moved past it, so
-- cleanup need not read the unsummarized recent pages every time until a VACUUM.
DROP INDEX outbox_events_published_at_idx;
CREATE INDEX outbox_events_published_at_idx ON outbox_events USING brin (published_at)
    WITH (autosummarize = on) WHERE status = 'published';

-- +goose Down
DROP INDEX outbox_events_published_at_idx;
CREATE INDEX outbox_events_published_at_idx ON outbox_events (published_at)
    WHERE status = 'published';
ALTER TABLE outbox_events SET (fillfactor = 70);
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_seq_key UNIQUE (seq);
DROP INDEX outbox_events_pending_idx;
CREATE INDEX outbox_events_pending_idx ON outbox_events (seq) WHERE status = 'pending';
