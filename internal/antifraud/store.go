package antifraud

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The queries of the consumer, all run inside the one transaction of a batch. Each takes
// its rows as parallel arrays and expands them with unnest, so a batch of any size costs one
// round trip per statement: what makes the consumer keep up with the relay.

// A processedRow is a row of processed_events.
type processedRow struct {
	eventID    uuid.UUID
	paymentID  uuid.UUID
	partition  int32
	offset     int64
	deliveries int // copies of the event in this batch, at least 1
}

// insertProcessed inserts the dedup rows of events seen for the first time and returns
// their ids. An event whose row exists already is left out: it is a redelivery.
// Concurrent consumers inserting the same id are serialised by the primary key: the
// second waits for the first to commit and then inserts nothing.
func insertProcessed(ctx context.Context, tx pgx.Tx, topic string, rows []processedRow) (map[uuid.UUID]bool, error) {
	n := len(rows)
	ids, payments := make([]uuid.UUID, n), make([]uuid.UUID, n)
	partitions, offsets, deliveries := make([]int32, n), make([]int64, n), make([]int32, n)
	for i, r := range rows {
		ids[i], payments[i] = r.eventID, r.paymentID
		partitions[i], offsets[i], deliveries[i] = r.partition, r.offset, int32(r.deliveries)
	}
	dbRows, err := tx.Query(ctx, `
		INSERT INTO processed_events (event_id, payment_id, topic, partition, "offset", deliveries)
		SELECT e.event_id, e.payment_id, $1, e.partition, e.offset, e.deliveries
		FROM unnest($2::uuid[], $3::uuid[], $4::int[], $5::bigint[], $6::int[])
		     AS e(event_id, payment_id, partition, "offset", deliveries)
		ON CONFLICT (event_id) DO NOTHING
		RETURNING event_id`,
		topic, ids, payments, partitions, offsets, deliveries)
	if err != nil {
		return nil, fmt.Errorf("insert processed events: %w", err)
	}
	fresh := make(map[uuid.UUID]bool, len(rows))
	var id uuid.UUID
	_, err = pgx.ForEachRow(dbRows, []any{&id}, func() error {
		fresh[id] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("insert processed events: %w", err)
	}
	return fresh, nil
}

// countRedeliveries adds the deliveries of events processed before to their counters.
// Counting is not a business effect: it only lets operators and the chaos verifier see how
// many duplicates the consumer absorbed.
func countRedeliveries(ctx context.Context, tx pgx.Tx, rows []processedRow) error {
	ids := make([]uuid.UUID, len(rows))
	deliveries := make([]int32, len(rows))
	for i, r := range rows {
		ids[i], deliveries[i] = r.eventID, int32(r.deliveries)
	}
	_, err := tx.Exec(ctx, `
		UPDATE processed_events p
		SET deliveries = p.deliveries + d.n, last_delivered_at = now()
		FROM unnest($1::uuid[], $2::int[]) AS d(event_id, n)
		WHERE p.event_id = d.event_id`,
		ids, deliveries)
	if err != nil {
		return fmt.Errorf("count redeliveries: %w", err)
	}
	return nil
}

// A velocityWindow asks for one user's payments that occurred in [from, to).
type velocityWindow struct {
	userID   string
	from, to time.Time
}

// recentPayments returns the decided payments that fall in the windows.
func recentPayments(ctx context.Context, tx pgx.Tx, windows []velocityWindow) ([]Payment, error) {
	users := make([]string, len(windows))
	froms := make([]time.Time, len(windows))
	tos := make([]time.Time, len(windows))
	for i, w := range windows {
		users[i], froms[i], tos[i] = w.userID, w.from, w.to
	}
	rows, err := tx.Query(ctx, `
		SELECT d.payment_id, d.user_id, d.amount, d.occurred_at
		FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS w(user_id, from_t, to_t)
		JOIN decisions d ON d.user_id = w.user_id AND d.occurred_at >= w.from_t AND d.occurred_at < w.to_t`,
		users, froms, tos)
	if err != nil {
		return nil, fmt.Errorf("select recent payments: %w", err)
	}
	payments, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Payment, error) {
		var p Payment
		err := row.Scan(&p.ID, &p.UserID, &p.Amount, &p.OccurredAt)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("select recent payments: %w", err)
	}
	return payments, nil
}

// A decisionRow is a row of decisions.
type decisionRow struct {
	paymentID  uuid.UUID
	eventID    uuid.UUID
	userID     string
	amount     int64
	currency   string
	decision   Decision
	occurredAt time.Time
}

// insertDecisions stores the decisions and returns how many rows it inserted. A payment
// that already has a decision (a second event with another id for the same payment, which
// the producer should never send) keeps its first one.
func insertDecisions(ctx context.Context, tx pgx.Tx, rows []decisionRow) (int64, error) {
	n := len(rows)
	payments, events := make([]uuid.UUID, n), make([]uuid.UUID, n)
	users, currencies, verdicts, reasons := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	amounts, occurred := make([]int64, n), make([]time.Time, n)
	for i, r := range rows {
		payments[i], events[i], users[i], amounts[i] = r.paymentID, r.eventID, r.userID, r.amount
		currencies[i], verdicts[i], occurred[i] = r.currency, string(r.decision.Verdict), r.occurredAt
		// unnest flattens a two-dimensional array, so each row's reasons travel as one
		// comma-separated string (the codes contain no comma); string_to_array('', ',') = '{}'.
		reasons[i] = strings.Join(r.decision.Reasons, ",")
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO decisions (payment_id, event_id, user_id, amount, currency, decision, reasons, occurred_at)
		SELECT d.payment_id, d.event_id, d.user_id, d.amount, d.currency, d.decision,
		       string_to_array(d.reasons, ','), d.occurred_at
		FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::timestamptz[])
		     AS d(payment_id, event_id, user_id, amount, currency, decision, reasons, occurred_at)
		ON CONFLICT DO NOTHING`,
		payments, events, users, amounts, currencies, verdicts, reasons, occurred)
	if err != nil {
		return 0, fmt.Errorf("insert decisions: %w", err)
	}
	return tag.RowsAffected(), nil
}

// A deadLetter is a poison record and why it is one.
type deadLetter struct {
	topic     string
	partition int32
	offset    int64
	key       []byte
	headers   map[string]string
	value     []byte
	reason    string
	detail    string
}

// insertDeadLetters stores poison records. A record delivered again is stored once.
func insertDeadLetters(ctx context.Context, tx pgx.Tx, letters []deadLetter) error {
	n := len(letters)
	topics, reasons, details, headers := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	partitions, offsets := make([]int32, n), make([]int64, n)
	keys, values := make([][]byte, n), make([][]byte, n)
	for i, l := range letters {
		h, err := json.Marshal(l.headers)
		if err != nil {
			return fmt.Errorf("encode dead letter headers: %w", err)
		}
		topics[i], partitions[i], offsets[i] = l.topic, l.partition, l.offset
		keys[i], values[i], headers[i] = l.key, l.value, string(h)
		reasons[i], details[i] = l.reason, l.detail
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO consumer_dead_letters (topic, partition, "offset", key, headers, value, reason, detail)
		SELECT l.topic, l.partition, l.offset, l.key, l.headers::jsonb, l.value, l.reason, l.detail
		FROM unnest($1::text[], $2::int[], $3::bigint[], $4::bytea[], $5::text[], $6::bytea[], $7::text[], $8::text[])
		     AS l(topic, partition, "offset", key, headers, value, reason, detail)
		ON CONFLICT (topic, partition, "offset") DO NOTHING`,
		topics, partitions, offsets, keys, headers, values, reasons, details)
	if err != nil {
		return fmt.Errorf("insert dead letters: %w", err)
	}
	return nil
}
