-- +goose Up

-- Every outbox row is updated twice after its insert: the relay's lease, then the mark
-- as published. The lease changes no indexed column, so PostgreSQL can do it as a HOT
-- update (no new index entries) if the row's page has room for the new version. With
-- the default fillfactor of 100 an insert-only table's pages are full and every lease
-- writes an entry into each of the table's five indexes. Leaving 30% of each page free
-- keeps leases HOT; the table is bigger by as much, and cleanup keeps it small anyway.
ALTER TABLE outbox_events SET (fillfactor = 70);

-- +goose Down
ALTER TABLE outbox_events RESET (fillfactor);
