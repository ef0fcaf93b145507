-- +goose Up

-- What the change-data-capture relay (RELAY_MODE=cdc, docs/adr/0003) needs from the
-- database. The polling relay ignores both objects, so this migration changes nothing
-- for it.

-- The CDC relay reads the outbox from a logical replication slot through the built-in
-- pgoutput plugin, which sends only the changes of the tables in the publications it is
-- given. Inserts only: the relay's own marks (status, published_at) and the cleaner's
-- deletes are UPDATEs and DELETEs, which it must not read back as new events.
-- A publication holds no WAL and costs nothing until a slot reads it.
CREATE PUBLICATION outbox_events_inserts FOR TABLE outbox_events WITH (publish = 'insert');

-- One row per replication slot whose start-up catch-up is over. A new slot streams only
-- the transactions that commit after it was created, so the relay first publishes the
-- rows still pending in the snapshot the slot was created with, then records the slot
-- here. A slot that exists with no row here was created by a relay that stopped before
-- its catch-up ended: the next relay publishes every pending row again (duplicates,
-- never a gap), then records it.
CREATE TABLE outbox_cdc_slots (
    slot_name    text        PRIMARY KEY,
    caught_up_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE outbox_cdc_slots;
DROP PUBLICATION outbox_events_inserts;
