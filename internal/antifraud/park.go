package antifraud

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/pguuid"
)

// An event whose predecessor has not been applied (OrderMissingPredecessor) is not
// refused like the other order violations: its predecessor may still come. The relay
// keeps each payment's order, but an event an operator sends back from the relay's DLQ
// reaches the topic after the later events of its payment that were published
// meanwhile. Marking such an event processed would make its dedup row stand for an effect
// that was never applied, and the user's totals would stay wrong for good. So it is
// parked (table parked_events, with its record) and gets no dedup row; a redelivery
// finds it parked and parks it again, once. When its predecessor is applied, in this
// batch or a later one, the parked event is applied right after it, in the same
// transaction, as if it had arrived then; or, when it came again in that batch behind
// its predecessor and was applied there, it only leaves the table.

// unpark applies the parked events that follow the payments' progress in advanced (the
// events of the batch just applied, batchApplied), repeatedly, so that a chain of parked
// events is applied in sequence. parked are the batch's own events waiting for a
// predecessor, whose dedup rows it deletes first; the table's are read for the same
// payments, and those the batch has applied already (delivered again) leave it. It
// inserts the dedup rows of the events it applies after those of the batch
// (processed_order is the order of application), deletes their table rows, parks the
// events still waiting, and returns the events applied and those that became another
// order violation (a second event of one sequence, say), which are recorded like any,
// and how many events wait.
func (c *Consumer) unpark(ctx context.Context, tx pgx.Tx, parked, batchApplied []paymentEvent, advanced map[uuid.UUID]progress) (applied []paymentEvent, violations []violation, counts parkedCounts, err error) {
	if len(parked) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM processed_events WHERE event_id = ANY($1)`, pguuid.Arrays(eventIDs(parked))); err != nil {
			return nil, nil, parkedCounts{}, fmt.Errorf("take back the dedup rows of parked events: %w", err)
		}
	}
	stored, err := selectParked(ctx, tx, advanced)
	if err != nil {
		return nil, nil, parkedCounts{}, err
	}
	// A parked event that the batch brought again and applied is done, with the batch
	// delivery's dedup row: applied from the table too, or refused there as a second
	// event of its sequence, it would count twice.
	var leave []uuid.UUID
	stored = slices.DeleteFunc(stored, func(ev paymentEvent) bool {
		again := slices.ContainsFunc(batchApplied, func(a paymentEvent) bool { return a.id == ev.id })
		if again {
			leave = append(leave, ev.id)
		}
		return again
	})
	inTable := map[uuid.UUID]bool{}
	for _, ev := range stored {
		inTable[ev.id] = true
	}
	waiting := append(stored, parked...)
	slices.SortStableFunc(waiting, func(a, b paymentEvent) int { return cmp.Compare(a.sequence, b.sequence) })
	for changed := true; changed; {
		changed = false
		var still []paymentEvent
		for _, ev := range waiting {
			p, ok := advanced[ev.payload.PaymentID]
			if !ok {
				still = append(still, ev) // its payment did not move in this batch
				continue
			}
			switch reason := orderViolation(p, ev); reason {
			case "":
				applied = append(applied, ev)
				advanced[ev.payload.PaymentID] = progress{sequence: ev.sequence, lastType: ev.typ, eventID: ev.id}
				changed = true
			case OrderMissingPredecessor:
				still = append(still, ev)
			default:
				violations = append(violations, violation{ev: ev, before: p, reason: reason})
				changed = true
			}
		}
		waiting = still
	}

	var done []paymentEvent // applied or refused: they leave the table and get a dedup row
	done = append(done, applied...)
	for _, v := range violations {
		done = append(done, v.ev)
	}
	var rows []processedRow
	for _, ev := range done {
		if inTable[ev.id] {
			leave = append(leave, ev.id)
		}
		rows = append(rows, processedRow{eventID: ev.id, paymentID: ev.payload.PaymentID, eventType: ev.typ,
			sequence: ev.sequence, partition: ev.record.Partition, offset: ev.record.Offset, deliveries: 1})
	}
	if len(leave) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM parked_events WHERE event_id = ANY($1)`, pguuid.Arrays(leave)); err != nil {
			return nil, nil, parkedCounts{}, fmt.Errorf("unpark events: %w", err)
		}
	}
	if len(rows) > 0 {
		if _, err := insertProcessed(ctx, tx, c.cfg.Topic, rows); err != nil {
			return nil, nil, parkedCounts{}, err
		}
	}
	var park []paymentEvent
	for _, ev := range waiting {
		if !inTable[ev.id] {
			park = append(park, ev)
		}
	}
	newlyParked, err := parkEvents(ctx, tx, park)
	if err != nil {
		return nil, nil, parkedCounts{}, err
	}
	return applied, violations, parkedCounts{parked: int(newlyParked), unparked: len(leave), waiting: len(waiting)}, nil
}

// parkedCounts is what one batch did to the parked events.
type parkedCounts struct {
	parked   int // events parked for the first time
	unparked int // events of the table applied (or refused) and removed from it
	waiting  int // events of the batch's payments still parked
}

func eventIDs(events []paymentEvent) []uuid.UUID {
	out := make([]uuid.UUID, len(events))
	for i, ev := range events {
		out[i] = ev.id
	}
	return out
}

// selectParked reads and locks the parked events of the payments in advanced.
func selectParked(ctx context.Context, tx pgx.Tx, advanced map[uuid.UUID]progress) ([]paymentEvent, error) {
	if len(advanced) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, 0, len(advanced))
	for id := range advanced {
		ids = append(ids, id)
	}
	rows, _ := tx.Query(ctx, `
		SELECT topic, partition, "offset", key, value, headers FROM parked_events
		WHERE payment_id = ANY($1) ORDER BY payment_id, sequence FOR UPDATE`, pguuid.Arrays(ids))
	var out []paymentEvent
	var r kgo.Record
	var headers []byte
	_, err := pgx.ForEachRow(rows, []any{&r.Topic, &r.Partition, &r.Offset, &r.Key, &r.Value, &headers}, func() error {
		rec := r
		var stored []storedHeader
		if err := json.Unmarshal(headers, &stored); err != nil {
			return fmt.Errorf("headers of parked record %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		for _, h := range stored {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
		}
		ev, poison := decodeRecord(&rec)
		if poison != nil {
			// It decoded when it was parked, and decoding depends on nothing else.
			return fmt.Errorf("parked record %s/%d/%d no longer decodes: %w", r.Topic, r.Partition, r.Offset, poison)
		}
		out = append(out, ev)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("select parked events: %w", err)
	}
	return out, nil
}

// storedHeader is a record header as parked_events.headers keeps it: both parts as
// bytes (base64 in JSON), so that any header round-trips unchanged.
type storedHeader struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

// parkEvents stores the events waiting for a predecessor, and returns how many it
// stored. A redelivered one is stored once.
func parkEvents(ctx context.Context, tx pgx.Tx, events []paymentEvent) (int64, error) {
	if len(events) == 0 {
		return 0, nil
	}
	n := len(events)
	ids, payments := make([]uuid.UUID, n), make([]uuid.UUID, n)
	sequences, partitions := make([]int32, n), make([]int32, n)
	topics, headers := make([]string, n), make([]string, n)
	offsets := make([]int64, n)
	keys, values := make([][]byte, n), make([][]byte, n)
	for i, ev := range events {
		r := ev.record
		ids[i], payments[i], sequences[i] = ev.id, ev.payload.PaymentID, int32(ev.sequence)
		topics[i], partitions[i], offsets[i], keys[i], values[i] = r.Topic, r.Partition, r.Offset, r.Key, r.Value
		stored := make([]storedHeader, len(r.Headers))
		for j, h := range r.Headers {
			stored[j] = storedHeader{Key: []byte(h.Key), Value: h.Value}
		}
		b, _ := json.Marshal(stored) // byte slices and structs of them always marshal
		headers[i] = string(b)
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO parked_events (event_id, payment_id, sequence, topic, partition, "offset", key, value, headers)
		SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[], $5::int[], $6::bigint[], $7::bytea[], $8::bytea[], $9::jsonb[])
		ON CONFLICT (event_id) DO NOTHING`,
		pguuid.Arrays(ids), pguuid.Arrays(payments), sequences, topics, partitions, offsets, keys, values, headers)
	if err != nil {
		return 0, fmt.Errorf("park events: %w", err)
	}
	return tag.RowsAffected(), nil
}

// countParked counts the events waiting in parked_events, every payment's.
func countParked(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM parked_events`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count parked events: %w", err)
	}
	return n, nil
}

// refreshParked sets antifraud_parked_events at start: afterwards, the batches that park
// or unpark set it.
func (c *Consumer) refreshParked(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.BatchTimeout)
	defer cancel()
	n, err := countParked(ctx, c.pool)
	if err != nil {
		c.logger.Warn("count parked events", slog.Any("err", err))
		return
	}
	c.metrics.parked.Set(float64(n))
}
