-- +goose Up

-- The dedup store. One row per event id the consumer has ever processed, inserted in the
-- same transaction as the event's effect (the decision below), so "processed" and
-- "effect applied" can never disagree. See docs/adr/0004-consumer-dedup-store.md.
CREATE TABLE processed_events (
    -- The X-Event-Id header: stable across redeliveries, hence the dedup key.
    event_id          uuid        PRIMARY KEY,
    payment_id        uuid        NOT NULL,
    -- Where the first delivery was read from, to trace an event back to the log.
    topic             text        NOT NULL,
    partition         integer     NOT NULL,
    "offset"          bigint      NOT NULL,
    -- How many times the event was delivered, the first time included. A redelivery is a
    -- no-op for the business tables but bumps this counter, so the chaos verifier can
    -- report the duplicates absorbed: sum(deliveries - 1). It is not a business effect.
    deliveries        integer     NOT NULL DEFAULT 1 CHECK (deliveries >= 1),
    processed_at      timestamptz NOT NULL DEFAULT now(),
    last_delivered_at timestamptz NOT NULL DEFAULT now()
);

-- Retention: old dedup rows are found by age.
CREATE INDEX processed_events_processed_at_idx ON processed_events (processed_at);

-- The business effect: one fraud decision per payment, whatever the number of deliveries.
CREATE TABLE decisions (
    payment_id  uuid        PRIMARY KEY,
    -- The event the decision was made from (processed_events.event_id).
    event_id    uuid        NOT NULL UNIQUE,
    user_id     text        NOT NULL,
    amount      bigint      NOT NULL,
    currency    text        NOT NULL,
    decision    text        NOT NULL CHECK (decision IN ('approve', 'review', 'block')),
    -- Why: the codes of the rules that fired; empty for an approval.
    reasons     text[]      NOT NULL DEFAULT '{}',
    -- Event time (the X-Event-Occurred-At header): the velocity window is measured on it.
    occurred_at timestamptz NOT NULL,
    -- Processing time.
    decided_at  timestamptz NOT NULL DEFAULT now()
);

-- Velocity: "this user's payments that occurred in [t - window, t)".
CREATE INDEX decisions_user_occurred_idx ON decisions (user_id, occurred_at);

-- Poison records: what could not be processed, and why. Written in the same transaction as
-- the batch they came in, so their offsets can be committed and the partition keeps moving.
CREATE TABLE consumer_dead_letters (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic       text        NOT NULL,
    partition   integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    key         bytea,
    -- The record headers as a JSON object of strings (the last value wins for a repeated key).
    headers     jsonb       NOT NULL DEFAULT '{}',
    value       bytea,
    -- A short code: missing_event_id, invalid_event_id, unknown_event_type, ...
    reason      text        NOT NULL,
    -- What lies behind the code, e.g. the JSON decoding error.
    detail      text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- A redelivered poison record is stored once.
    UNIQUE (topic, partition, "offset")
);

-- +goose Down
DROP TABLE consumer_dead_letters;
DROP TABLE decisions;
DROP TABLE processed_events;
