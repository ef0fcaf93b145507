package hostile

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// hostileRecords is the hostile-records scenario: while the payments arrive, the harness
// writes to the topic, as another producer on the DIRECT listener, records that break
// the record contract (hostileKinds) and second copies of real events with another
// payload. The consumer must dead-letter every hostile record, count every copy as a
// duplicate of the event it had already decided, decide every real payment once, and
// never stop.
type hostileRecords struct {
	// Foreign receives the position of every record the broker acknowledged; the
	// verifier leaves them out (Scenario.Foreign).
	Foreign *verify.ForeignRecords
	// For is how long the writing lasts: one record every Every.
	For, Every time.Duration

	mu       sync.Mutex
	written  map[string]int                      // kind -> records acknowledged
	copies   map[verify.RecordPosition]uuid.UUID // a duplicate's position -> the real event id it copies
	writeErr error                               // the first write that failed
}

// disrupt writes one record every Every for For: the hostile kinds in turn and, every
// third record, a copy of an event the consumer has already decided, so that the real
// event is always the first copy processed and the copy never displaces it (the first
// processed wins, docs/adr/0004).
func (h *hostileRecords) disrupt(ctx context.Context, rn *harness.Run) error {
	h.mu.Lock()
	h.written, h.copies, h.writeErr = map[string]int{}, map[verify.RecordPosition]uuid.UUID{}, nil
	h.mu.Unlock()
	h.Foreign.Reset()
	producer, err := kgo.NewClient(kgo.SeedBrokers(rn.Brokers...), kgo.DefaultProduceTopic(rn.Topic))
	if err != nil {
		return fmt.Errorf("new Kafka producer for hostile records: %w", err)
	}
	defer producer.Close()
	rn.Disrupted("hostile records begin", fmt.Sprintf("one every %s for %s, from the harness's own producer", h.Every, h.For))
	end := time.Now().Add(h.For)
	hostile := 0
	for i := 0; time.Now().Before(end); i++ {
		if backoff.Until(ctx, time.Now().Add(h.Every)) != nil {
			break
		}
		if i%3 == 2 {
			if eventID, paymentID, ok := h.decidedEvent(ctx, rn); ok {
				h.write(ctx, rn, producer, verify.CopyKind, duplicateRecord(eventID, paymentID, time.Now()))
				continue
			}
		}
		k := hostileKinds[hostile%len(hostileKinds)]
		hostile++
		h.write(ctx, rn, producer, k.kind, k.build(time.Now()))
	}
	rn.Disrupted("hostile records end", h.summary())
	return nil
}

// decidedEvent picks a decided event the harness has not copied yet, from the consumer's
// decisions (a table the contract requires, with its event_id).
func (h *hostileRecords) decidedEvent(ctx context.Context, rn *harness.Run) (eventID, paymentID uuid.UUID, ok bool) {
	h.mu.Lock()
	copied := []string{} // not nil: ANY(NULL) matches nothing
	for _, id := range h.copies {
		copied = append(copied, id.String())
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rn.ConsumerDB)
	if err != nil {
		return uuid.Nil, uuid.Nil, false
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT event_id::text, payment_id::text FROM decisions WHERE NOT event_id::text = ANY($1) ORDER BY random() LIMIT 1`, copied).Scan(&eventID, &paymentID)
	return eventID, paymentID, err == nil
}

// write produces r and records its position once the broker acknowledged it, so that
// only records really in the topic are counted and judged.
func (h *hostileRecords) write(ctx context.Context, rn *harness.Run, producer *kgo.Client, kind string, r *kgo.Record) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res := producer.ProduceSync(ctx, r)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := res.FirstErr(); err != nil {
		rn.Logger.Warn("write a hostile record", slog.String("kind", kind), slog.Any("err", err))
		if h.writeErr == nil {
			h.writeErr = fmt.Errorf("write a %s record: %w", kind, err)
		}
		return
	}
	at := verify.RecordPosition{Partition: r.Partition, Offset: r.Offset}
	h.Foreign.Add(at, kind)
	h.written[kind]++
	if kind == verify.CopyKind {
		eventID, _ := uuid.ParseBytes(r.Headers[0].Value)
		h.copies[at] = eventID
	}
}

// summary counts the records written, by kind.
func (h *hostileRecords) summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	kinds := slices.Sorted(maps.Keys(h.written))
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, h.written[k])
	}
	got := strings.Join(parts, ", ")
	if h.writeErr != nil {
		got += "; " + h.writeErr.Error()
	}
	return got
}
