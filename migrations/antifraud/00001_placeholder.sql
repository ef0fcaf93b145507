-- +goose Up
-- The antifraud consumer's tables arrive with the consumer (issue 4).
SELECT 1;
-- +goose Down
SELECT 1;
