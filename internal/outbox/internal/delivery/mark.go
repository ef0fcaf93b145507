package delivery

// Both relays move what Kafka acknowledged from outbox_events to outbox_published with
// the same statement: GET /payments/{id}, the cleaner and operators' queries see one
// layout in both modes.

// MarkByIDSQL moves the events $1, which the broker acknowledged, from the outbox to
// its history, in one statement. Only pending rows move: a row that is
// failed stays in the outbox (the CDC relay marks rows it does not lock).
const MarkByIDSQL = `
		WITH moved AS (
			DELETE FROM outbox_events WHERE id = ANY($1) AND status = 'pending'
			` + moveToHistorySQL

// MarkByTIDSQL is MarkByIDSQL for rows the caller's transaction holds locked, found by
// their ctids $1: a TID scan instead of an index descent per event. The polling relay
// marks its claimed rows with it.
const MarkByTIDSQL = `
		WITH moved AS (
			DELETE FROM outbox_events WHERE ctid = ANY($1::tid[])
			` + moveToHistorySQL

// moveToHistorySQL is the rest of both marks: the deleted rows go to outbox_published.
const moveToHistorySQL = `RETURNING id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent
		)
		INSERT INTO outbox_published (id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent)
		SELECT id, seq, event_type, aggregate_id, payload, attempts, rejections, created_at, traceparent FROM moved`
