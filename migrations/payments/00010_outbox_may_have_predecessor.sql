-- +goose Up

-- The order rule of the claim (internal/outbox/poll/store.go) keeps an event back while an
-- earlier event of its aggregate is still in the outbox. Checking it is a probe of
-- outbox_events_aggregate_idx for every candidate row, and it was the largest cost of a
-- claim (docs/bench.md: the SQL ladder's `ours_probe_every_row` rung against `ours`;
-- docs/adr/0002). Most events cannot be behind anything: a payment's creation is its
-- aggregate's first event, and a transition written after the previous event was
-- published finds nothing before it either.
--
-- So the writer answers the question once, in the statement that inserts the event
-- (outbox.Insert): may_have_predecessor is true when an earlier event of the aggregate
-- was in the outbox at that moment, and the claim probes only those rows. The answer
-- cannot go stale in the unsafe direction: an event leaves the outbox only once it is
-- published, and none comes back before a later one, because writers of one aggregate
-- are serialised (the payment's row lock) and a crash undoes a suffix of the WAL, never
-- a move that the insert's own commit came after.
--
-- The default is true, the safe answer: a writer that does not set the column (an
-- older API during a rolling deploy, a hand-written fix) gets its rows probed as before.
-- Existing rows take the default, so adding the column rewrites nothing.
ALTER TABLE outbox_events ADD COLUMN may_have_predecessor boolean NOT NULL DEFAULT true;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN may_have_predecessor;
