-- +goose Up

-- consumer_dead_letters.headers was "a JSON object of strings" (00001). Dead letters come
-- from whoever can write to the topic, and a Kafka header is bytes, while a jsonb string
-- must be UTF-8 without NUL (PostgreSQL refuses \u0000): such a header made the dead letter
-- itself fail, and with it its batch, on every attempt. The consumer now escapes what is
-- not text (internal/antifraud/store.go, headersJSON). The column keeps its type; the
-- comments below say how to read it, in psql's \d+ where an operator looks.
COMMENT ON COLUMN consumer_dead_letters.headers IS
    'The record headers, last value per key. A value that is not UTF-8 text without NUL is {"base64": "..."}; such a key is Go-quoted (strconv.QuoteToASCII), so a key that starts with a double quote is a quoted one.';
COMMENT ON COLUMN consumer_dead_letters.reason IS
    'missing_event_id, invalid_event_id, unknown_event_type, invalid_occurred_at, invalid_payload, invalid_key, or store_failed (the database refused a record that passed every check: fix decodeRecord).';

-- +goose Down
COMMENT ON COLUMN consumer_dead_letters.reason IS NULL;
COMMENT ON COLUMN consumer_dead_letters.headers IS NULL;
