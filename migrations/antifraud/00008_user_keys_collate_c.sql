-- +goose Up
-- The user and currency keys compare byte by byte (docs/bench.md, "The consumer"). Every
-- event inserts into decisions_user_occurred_idx, looks up and upserts its user's
-- user_totals row and counts the user's recent decisions: each a B-tree descent of text
-- comparisons. Under the database's default collation each comparison is a call to the C
-- library's strcoll; under "C" it is a memcmp. A user id is visible ASCII
-- (internal/event/userid.go) and a currency three upper-case letters, for which both
-- orders are the same: only the cost changes. The consumer takes user_totals rows in this
-- order (internal/antifraud/totals.go), and says COLLATE "C" where it sorts its own keys.
ALTER TABLE decisions ALTER COLUMN user_id TYPE text COLLATE "C";
ALTER TABLE user_totals
    ALTER COLUMN user_id  TYPE text COLLATE "C",
    ALTER COLUMN currency TYPE text COLLATE "C";

-- +goose Down
ALTER TABLE user_totals
    ALTER COLUMN currency TYPE text COLLATE "default",
    ALTER COLUMN user_id  TYPE text COLLATE "default";
ALTER TABLE decisions ALTER COLUMN user_id TYPE text COLLATE "default";
