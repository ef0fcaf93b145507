package relay

// The two minimal relays: the floor, a minimal relay on a minimal table of its own, and
// the same-schema comparison, the same minimal loop on our outbox_events table. The
// floor says what any polling relay costs on the machine it runs on; the same-schema one
// says how much of the difference is our schema and how much our relay's logic.
//
// Both are one loop: BEGIN; SELECT ... FOR UPDATE SKIP LOCKED LIMIT 500; ProduceSync;
// UPDATE ... WHERE id = ANY(...); COMMIT, polling every 10 ms when idle. They hold a
// transaction and row locks across the Kafka round trip and have no lease, no order per
// aggregate beyond their one loop and no failure handling: everything our relay exists
// to provide, and what the ratios relay_to_floor_ratio and relay_to_minimal_ratio
// (docs/bench.md) put a price on.

import (
	"context"
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/measure"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/outbox/cdc"
)

const (
	minimalRelayBatchSize = 500
	minimalRelayIdlePoll  = 10 * time.Millisecond
)

// floorTableSQL is the floor's table. It is a benchmark fixture, not part of the
// service, so it lives here and not in migrations/. There is no primary key on purpose:
// the partial index is the only index, so marking a row published writes no index entry
// (the row leaves the index's predicate), which is the least any polling relay can write.
const floorTableSQL = `
	CREATE TABLE floor_events (
		id        bigserial,
		key       text    NOT NULL,
		payload   jsonb   NOT NULL,
		published boolean NOT NULL DEFAULT false
	);
	CREATE INDEX floor_events_pending_idx ON floor_events (id) WHERE NOT published`

// floorRelay is the minimal relay on the minimal table floor_events.
type floorRelay struct {
	brokers []string
	// opts are added to its producer's options (the benchmark's hooks).
	opts []kgo.Opt
}

func (floorRelay) Fill(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if _, err := pool.Exec(ctx, `TRUNCATE floor_events`); err != nil {
		return fmt.Errorf("truncate floor table: %w", err)
	}
	_, err := pool.Exec(ctx, `
		INSERT INTO floor_events (key, payload)
		SELECT p.id::text, `+benchenv.BacklogPayloadSQL+`
		FROM (SELECT gen_random_uuid() AS id, i FROM generate_series(1, $1) AS i) p`, n)
	if err != nil {
		return fmt.Errorf("insert floor backlog: %w", err)
	}
	return benchenv.VacuumAnalyze(ctx, pool, "floor_events")
}

func (floorRelay) Pending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var pending bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM floor_events WHERE NOT published)`).Scan(&pending); err != nil {
		return false, fmt.Errorf("check floor backlog: %w", err)
	}
	return pending, nil
}

func (floorRelay) Insert(ctx context.Context, tx pgx.Tx, key string, payload []byte) error {
	if _, err := tx.Exec(ctx, `INSERT INTO floor_events (key, payload) VALUES ($1, $2)`, key, payload); err != nil {
		return fmt.Errorf("insert floor event: %w", err)
	}
	return nil
}

func (f floorRelay) Start(ctx context.Context, pool *pgxpool.Pool, topic string) (*measure.Running, error) {
	return startMinimalRelay(ctx, append(floorClientOpts(f.brokers), f.opts...), func(ctx context.Context, client *kgo.Client) (int, error) {
		return floorBatch(ctx, pool, minimalRelayBatchSize, "", func(records []*kgo.Record) error {
			for _, r := range records {
				r.Topic = topic
			}
			return client.ProduceSync(ctx, records...).FirstErr()
		})
	})
}

// floorBatch publishes one batch of at most n events of the floor: lock them, hand
// their records to publish, flag them published, commit. The record carries the key
// and the payload only: the floor's table has nothing else to send. where adds a
// condition on the candidates e (the SQL ladder's order rule); a nil publish publishes
// nothing (the ladder measures the database alone).
func floorBatch(ctx context.Context, pool *pgxpool.Pool, n int, where string, publish func([]*kgo.Record) error) (int, error) {
	claimed := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `
			SELECT e.id, e.key, e.payload FROM floor_events e
			WHERE NOT e.published `+where+` ORDER BY e.id LIMIT $1 FOR UPDATE SKIP LOCKED`, n)
		var ids []int64
		var records []*kgo.Record
		var id int64
		var key string
		var payload []byte
		_, err := pgx.ForEachRow(rows, []any{&id, &key, &payload}, func() error {
			ids = append(ids, id)
			records = append(records, &kgo.Record{Key: []byte(key), Value: payload})
			return nil
		})
		if err != nil || len(ids) == 0 {
			return err
		}
		if publish != nil {
			if err := publish(records); err != nil {
				return fmt.Errorf("produce: %w", err)
			}
		}
		claimed = len(ids)
		// AND NOT published lets the partial index, the table's only index, find the rows.
		_, err = tx.Exec(ctx, `UPDATE floor_events SET published = true WHERE id = ANY($1) AND NOT published`, ids)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("floor relay batch: %w", err)
	}
	return claimed, nil
}

// sameSchemaRelay is the minimal loop on our outbox_events table, with our table's
// indexes and fillfactor, marking as our relay does (the move to
// outbox_published): the same-schema comparison.
type sameSchemaRelay struct {
	measure.OutboxTable
	brokers []string
}

func (s sameSchemaRelay) Start(ctx context.Context, pool *pgxpool.Pool, topic string) (*measure.Running, error) {
	return startMinimalRelay(ctx, floorClientOpts(s.brokers), func(ctx context.Context, client *kgo.Client) (int, error) {
		return sameSchemaBatch(ctx, pool, client, topic)
	})
}

// sameSchemaBatch publishes one batch of the same-schema minimal relay, with our
// record envelope (internal/event), as our relay does.
func sameSchemaBatch(ctx context.Context, pool *pgxpool.Pool, client *kgo.Client, topic string) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Ordered as the table's partial index of pending rows is, so that the loop
		// reads the backlog through it, as our relay's claim does.
		rows, _ := tx.Query(ctx, `
			SELECT id, aggregate_id, event_type, payload, created_at FROM outbox_events
			WHERE status = 'pending' ORDER BY next_attempt_at, seq LIMIT $1 FOR UPDATE SKIP LOCKED`, minimalRelayBatchSize)
		var ids []uuid.UUID
		var records []*kgo.Record
		var e event.Envelope
		_, err := pgx.ForEachRow(rows, []any{&e.ID, &e.Key, &e.Type, &e.Payload, &e.OccurredAt}, func() error {
			ids = append(ids, e.ID)
			records = append(records, e.Record(topic, time.Now()))
			return nil
		})
		if err != nil || len(ids) == 0 {
			return err
		}
		if err := client.ProduceSync(ctx, records...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		n = len(ids)
		// Marked as our relay marks: moved to outbox_published.
		_, err = tx.Exec(ctx, cdc.MarkPublishedSQL, ids)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("same-schema relay batch: %w", err)
	}
	return n, nil
}

// startMinimalRelay runs batch in a loop until stopped, polling every
// minimalRelayIdlePoll after a batch that found nothing, with a Kafka client of opts
// (floorClientOpts: configured like our relay's where it matters for speed).
func startMinimalRelay(ctx context.Context, opts []kgo.Opt, batch func(context.Context, *kgo.Client) (int, error)) (*measure.Running, error) {
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("new minimal relay producer: %w", err)
	}
	loop := func(ctx context.Context) error {
		defer client.Close()
		idle := time.NewTimer(0)
		defer idle.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-idle.C:
			}
			n, err := batch(ctx, client)
			if err != nil && ctx.Err() == nil {
				return err
			}
			if n == 0 {
				idle.Reset(minimalRelayIdlePoll)
			} else {
				idle.Reset(0)
			}
		}
	}
	return measure.GoRun(ctx, func() {}, loop), nil
}

// floorClientOpts are the minimal relays' producer options. What decides the speed of
// a ProduceSync is the same as in our relay (internal/outbox's clientOpts): acks from
// all in-sync replicas, the idempotent producer (franz-go's default, kept), no linger,
// and franz-go's default partitioner and compression. Our relay's timeouts
// (delivery, request, dial, metadata age) only change how a failure ends, and the
// minimal relays never fail on a healthy broker, so they are left out.
func floorClientOpts(brokers []string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	}
}
