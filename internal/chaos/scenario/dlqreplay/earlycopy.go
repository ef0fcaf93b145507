package dlqreplay

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
)

// Early copies. A relay that keeps each payment's order never shows the consumer an
// event before its predecessor, so the consumer's rule for that moment (park the event,
// apply it when the predecessor comes: a replayed event overtaken by its successors)
// would go untested whenever the relay is right. So, as the topic watch's copies test
// the dedup whatever the relay does, the harness publishes, before each round of
// replays, a copy of every event that waits behind a dead letter of its payment: the
// record the relay will write, built from the outbox row with the envelope every
// producer of the topic uses, on the partition the relay's key partitioner picks. The
// consumer must park each one, apply it once its predecessor arrives, and take the
// relay's own record for a copy. The verifier and the topic watch leave these records
// out (Scenario.Foreign), so the relay's order is still judged on its records alone.

// An earlyCopy is a record the harness published ahead of the relay.
type earlyCopy struct {
	PaymentID string
	Sequence  int
	At        verify.RecordPosition
}

// copier publishes the early copies of one run.
type copier struct {
	producer *kgo.Client
	foreign  *verify.ForeignRecords
	// copied are the event ids copied so far: each is copied once.
	copied map[uuid.UUID]bool
}

// newCopier makes the producer of the early copies, on the run's direct listener.
func newCopier(rn *harness.Run, foreign *verify.ForeignRecords) (*copier, error) {
	producer, err := kafkasec.NewClient(rn.Brokers, rn.KafkaOpts,
		kgo.DefaultProduceTopic(rn.Topic),
		// The relay's partitioner (murmur2 of the key, as Kafka's own clients), so that
		// a copy lands on its payment's partition, ahead of the relay's records.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	)
	if err != nil {
		return nil, fmt.Errorf("new Kafka producer for the early copies: %w", err)
	}
	return &copier{producer: producer, foreign: foreign, copied: map[uuid.UUID]bool{}}, nil
}

func (c *copier) close() { c.producer.Close() }

// copyWaiting publishes a copy of each event not copied yet that waits behind a dead
// letter of its payment (an earlier event of the payment with a DLQ entry, failed or
// replayed and not yet published), and returns the copies the broker took.
func (c *copier) copyWaiting(ctx context.Context, conn *pgx.Conn) ([]earlyCopy, error) {
	rows, _ := conn.Query(ctx, `
		SELECT e.id, e.event_type, e.aggregate_id, e.payload, e.created_at, coalesce((e.payload->>'sequence')::int, 1)
		FROM outbox_events e
		WHERE e.status IN ('pending', 'failed')
		  AND EXISTS (SELECT 1 FROM outbox_events b JOIN outbox_dlq q ON q.event_id = b.id
		              WHERE b.aggregate_id = e.aggregate_id AND b.seq < e.seq)
		ORDER BY e.seq`)
	type waiting struct {
		envelope event.Envelope
		sequence int
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (waiting, error) {
		var w waiting
		err := row.Scan(&w.envelope.ID, &w.envelope.Type, &w.envelope.Key, &w.envelope.Payload, &w.envelope.OccurredAt, &w.sequence)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("read events waiting behind dead letters: %w", err)
	}
	var copies []earlyCopy
	for _, w := range events {
		if c.copied[w.envelope.ID] {
			continue
		}
		produced, err := c.producer.ProduceSync(ctx, w.envelope.Record("", time.Now())).First()
		if err != nil {
			return copies, fmt.Errorf("publish an early copy of %s: %w", w.envelope.ID, err)
		}
		at := verify.RecordPosition{Partition: produced.Partition, Offset: produced.Offset}
		c.foreign.Add(at, verify.CopyKind)
		c.copied[w.envelope.ID] = true
		copies = append(copies, earlyCopy{PaymentID: w.envelope.Key, Sequence: w.sequence, At: at})
	}
	return copies, nil
}
