-- +goose Up

-- GET /payments/{id} finds the payment's event by aggregate_id, published or not, so the
-- partial index on unfinished rows is not enough: it would scan up to 30 days of
-- published rows. One full (aggregate_id, seq) index serves both that lookup and the
-- relay's "earlier unfinished event of this aggregate?" check, which then reads the
-- status of the few earlier rows of one aggregate from the table. One index instead of
-- two keeps the insert path (the API's write rate) as cheap as before.
DROP INDEX outbox_events_unfinished_idx;
CREATE INDEX outbox_events_aggregate_idx ON outbox_events (aggregate_id, seq);

-- +goose Down
DROP INDEX outbox_events_aggregate_idx;
CREATE INDEX outbox_events_unfinished_idx ON outbox_events (aggregate_id, seq)
    WHERE status <> 'published';
