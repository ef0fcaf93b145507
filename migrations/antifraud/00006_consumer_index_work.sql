-- +goose Up
-- Less index work per event (docs/bench.md, "The consumer": PostgreSQL executing the
-- consumer's statements is its bound, and each index is one more insert per event).

-- decisions.event_id was UNIQUE (00001): a second index on every decision, kept by no
-- query, that guarded against one event deciding two payments. An event names one
-- payment, and processed_events' primary key already lets each event through once, in
-- the transaction that writes the decision: the constraint proved nothing new.
ALTER TABLE decisions DROP CONSTRAINT decisions_event_id_key;

-- The cleaner finds expired dedup rows by age (internal/antifraud/cleanup.go). Rows are
-- inserted in processed_at order, so a BRIN index (one summary per 128 pages) finds them
-- as well as the B-tree did, at a fraction of its cost per insert and of its size.
DROP INDEX processed_events_processed_at_idx;
CREATE INDEX processed_events_processed_at_brin ON processed_events USING brin (processed_at);

-- +goose Down
DROP INDEX processed_events_processed_at_brin;
CREATE INDEX processed_events_processed_at_idx ON processed_events (processed_at);
ALTER TABLE decisions ADD CONSTRAINT decisions_event_id_key UNIQUE (event_id);
