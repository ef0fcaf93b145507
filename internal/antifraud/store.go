package antifraud

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/pguuid"
)

// The queries of the consumer, all run inside the transaction of a batch slice. Each takes
// its rows as parallel arrays and expands them with unnest, so a batch of any size costs one
// round trip per statement (docs/bench.md, "The consumer", says where the time goes).

// A processedRow is a row of processed_events.
type processedRow struct {
	eventID    uuid.UUID
	paymentID  uuid.UUID
	eventType  string
	sequence   int
	partition  int32
	offset     int64
	deliveries int // copies of the event in this batch, at least 1
}

// insertProcessed inserts the dedup rows of events seen for the first time and returns
// their ids. An event whose row exists already is left out: it is a redelivery.
// Concurrent consumers inserting the same id are serialised by the primary key: the
// second waits for the first to commit and then inserts nothing. Rows go in in the
// batch's order, which processed_order records for the chaos verifier.
func insertProcessed(ctx context.Context, tx pgx.Tx, topic string, rows []processedRow) (map[uuid.UUID]bool, error) {
	n := len(rows)
	ids, payments := make([]uuid.UUID, n), make([]uuid.UUID, n)
	types, sequences := make([]string, n), make([]int32, n)
	partitions, offsets, deliveries := make([]int32, n), make([]int64, n), make([]int32, n)
	for i, r := range rows {
		ids[i], payments[i], types[i], sequences[i] = r.eventID, r.paymentID, r.eventType, int32(r.sequence)
		partitions[i], offsets[i], deliveries[i] = r.partition, r.offset, int32(r.deliveries)
	}
	dbRows, err := tx.Query(ctx, `
		INSERT INTO processed_events (event_id, payment_id, event_type, sequence, topic, partition, "offset", deliveries)
		SELECT e.event_id, e.payment_id, e.event_type, e.sequence, $1, e.partition, e.offset, e.deliveries
		FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::int[], $6::int[], $7::bigint[], $8::int[])
		     WITH ORDINALITY AS e(event_id, payment_id, event_type, sequence, partition, "offset", deliveries, i)
		ORDER BY e.i
		ON CONFLICT (event_id) DO NOTHING
		RETURNING event_id`,
		topic, pguuid.Arrays(ids), pguuid.Arrays(payments), types, sequences, partitions, offsets, deliveries)
	if err != nil {
		return nil, fmt.Errorf("insert processed events: %w", err)
	}
	fresh := make(map[uuid.UUID]bool, len(rows))
	var id uuid.UUID
	_, err = pgx.ForEachRow(dbRows, []any{(*[16]byte)(&id)}, func() error {
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
		pguuid.Arrays(ids), deliveries)
	if err != nil {
		return fmt.Errorf("count redeliveries: %w", err)
	}
	return nil
}

// A totalKey names a row of user_totals.
type totalKey struct {
	userID   string
	currency string
}

// selectHistory reads what the rules need to know of each payment's user from the
// database, in one statement (each statement is one more round trip and one more
// execution per slice, docs/bench.md "The consumer"):
//
//   - recent[i], how many committed decisions of payments[i]'s user, for another payment,
//     occurred in the velocity window before it: the bounds of Rules.inVelocityWindow,
//     [occurred_at - window, occurred_at). The database counts through
//     decisions_user_occurred_idx and sends one number per payment, and stops at
//     maxRecent: each decision counted is a visit to its heap row, and past
//     Rules.VelocityBlock more of them cannot change a verdict (the rules only compare the
//     count with thresholds), so a busy user costs at most maxRecent visits;
//   - totals, the running totals of the payments' users in the payments' currencies. A
//     user the consumer has never seen in a currency has no row, hence no entry: the
//     zero Total. Amounts above math.MaxInt64 come back capped (see Total.Amount).
func selectHistory(ctx context.Context, tx pgx.Tx, payments []Payment, window time.Duration, maxRecent int) (recent []int, totals map[totalKey]Total, err error) {
	n := len(payments)
	ids, users, currencies := make([]uuid.UUID, n), make([]string, n), make([]string, n)
	froms, tos := make([]time.Time, n), make([]time.Time, n)
	for i, p := range payments {
		ids[i], users[i], currencies[i] = p.ID, p.UserID, p.Currency
		froms[i], tos[i] = p.OccurredAt.Add(-window), p.OccurredAt
	}
	rows, err := tx.Query(ctx, `
		SELECT (SELECT count(*) FROM (
		            SELECT FROM decisions d
		            WHERE d.user_id = w.user_id AND d.occurred_at >= w.from_t AND d.occurred_at < w.to_t
		              AND d.payment_id <> w.payment_id
		            LIMIT $6) AS capped),
		       t.payment_count, least(t.amount_total, 9223372036854775807)::bigint
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[])
		     WITH ORDINALITY AS w(payment_id, user_id, currency, from_t, to_t, i)
		LEFT JOIN user_totals t ON t.user_id = w.user_id AND t.currency = w.currency
		ORDER BY w.i`,
		pguuid.Arrays(ids), users, currencies, froms, tos, maxRecent)
	if err != nil {
		return nil, nil, fmt.Errorf("select history: %w", err)
	}
	recent, totals = make([]int, 0, n), map[totalKey]Total{}
	var count int
	var payments64, amount *int64 // NULL: no totals row
	_, err = pgx.ForEachRow(rows, []any{&count, &payments64, &amount}, func() error {
		p := payments[len(recent)]
		recent = append(recent, count)
		if payments64 != nil {
			totals[totalKey{p.UserID, p.Currency}] = Total{Payments: *payments64, Amount: *amount}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("select history: %w", err)
	}
	if len(recent) != n {
		return nil, nil, fmt.Errorf("select history: %d rows for %d payments", len(recent), n)
	}
	return recent, totals, nil
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
		pguuid.Arrays(payments), pguuid.Arrays(events), users, amounts, currencies, verdicts, reasons, occurred)
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
	headers   map[string]string // as event.HeaderValues decodes them: bytes, not text
	value     []byte
	reason    string
	detail    string // storable text (see storableText)
}

// insertDeadLetters stores poison records. A record delivered again is stored once.
// Storing must never fail on what the record carries, or the poison record would stall
// its partition all the same: key and value are bytea, which takes any bytes, headers go
// through headersJSON, and the detail was made storable by newDeadLetter.
func insertDeadLetters(ctx context.Context, tx pgx.Tx, letters []deadLetter) error {
	n := len(letters)
	topics, reasons, details, headers := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	partitions, offsets := make([]int32, n), make([]int64, n)
	keys, values := make([][]byte, n), make([][]byte, n)
	for i, l := range letters {
		topics[i], partitions[i], offsets[i] = l.topic, l.partition, l.offset
		keys[i], values[i], headers[i] = l.key, l.value, headersJSON(l.headers)
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

// headersJSON encodes headers as the JSON object of consumer_dead_letters.headers. Header
// keys and values are bytes, while a jsonb string must be UTF-8 without NUL (PostgreSQL
// refuses \u0000), so what is not such text is escaped, never altered or dropped:
//
//   - a value becomes {"base64": "<standard base64 of the bytes>"} instead of a string;
//   - a key becomes its Go-quoted form (strconv.QuoteToASCII, undone by strconv.Unquote).
//     A text key that starts with a double quote is quoted too, so a stored key that starts
//     with one is always a quoted key.
//
// A record of our producer has text headers only and reads as a plain object of strings.
func headersJSON(headers map[string]string) string {
	obj := make(map[string]any, len(headers))
	for k, v := range headers {
		if !isStorableText(k) || strings.HasPrefix(k, `"`) {
			k = strconv.QuoteToASCII(k)
		}
		if isStorableText(v) {
			obj[k] = v
		} else {
			obj[k] = map[string]string{"base64": base64.StdEncoding.EncodeToString([]byte(v))}
		}
	}
	// Marshalling strings and maps of strings cannot fail.
	b, _ := json.Marshal(obj)
	return string(b)
}

// isStorableText reports whether s can be stored as text or as a jsonb string as it is.
func isStorableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// maxDetailBytes bounds a dead letter's detail: a detail may quote a header of the
// record, and a header may be as large as the broker allows.
const maxDetailBytes = 1024

// storableText returns s cut to maxDetailBytes and made storable as text: invalid UTF-8
// becomes U+FFFD and NUL becomes the four characters \x00. It is for messages meant for
// people, never for data that must round-trip.
func storableText(s string) string {
	if len(s) > maxDetailBytes {
		s = s[:maxDetailBytes] + "..."
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
}
