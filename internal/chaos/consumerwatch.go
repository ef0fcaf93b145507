package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A consumerWatch looks at a consumer from outside, through the names of the contract
// only: its decisions table, its consumer group's committed offsets and the topic. It
// tells crashConsumer when to kill, and what each death leaves for the restart to
// redeliver, without reading anything the consumer reports about itself.
type consumerWatch struct {
	rn   *Run
	db   *pgx.Conn
	kcl  *kgo.Client
	adm  *kadm.Client
	poll time.Duration
}

// newConsumerWatch connects to the consumer's database and to Kafka's DIRECT listener.
func newConsumerWatch(ctx context.Context, rn *Run) (*consumerWatch, error) {
	if rn.group == "" {
		return nil, fmt.Errorf("watch the consumer: no consumer group known (the harness must start the consumer)")
	}
	db, err := pgx.Connect(ctx, rn.consumerDB)
	if err != nil {
		return nil, fmt.Errorf("connect to the consumer database: %w", err)
	}
	kcl, err := kgo.NewClient(kgo.SeedBrokers(rn.brokers...))
	if err != nil {
		db.Close(ctx)
		return nil, fmt.Errorf("new Kafka client: %w", err)
	}
	return &consumerWatch{rn: rn, db: db, kcl: kcl, adm: kadm.NewClient(kcl), poll: 10 * time.Millisecond}, nil
}

// Close releases the connections.
func (w *consumerWatch) Close() {
	w.kcl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	w.db.Close(ctx)
}

// untilWorthKilling waits until the current incarnation has made a decision, then a
// random cfg.Arm, then up to cfg.Watch for a decision being written, and returns the
// moment to kill: right after that decision (busy), or at the end of Watch if records
// still wait for the consumer. A consumer that has caught up is left alone until new
// records make it decide again. It returns early, with self set, if the consumer dies
// by itself.
func (w *consumerWatch) untilWorthKilling(ctx context.Context, cfg consumerCrashes) (death, error) {
	exited := w.rn.Consumer.Exited()
	last, err := w.decisions(ctx)
	if err != nil {
		return death{}, err
	}
	ticker := time.NewTicker(w.poll)
	defer ticker.Stop()
	// wait ticks until ctx ends, the consumer dies, or the deadline passes (zero: none).
	wait := func(deadline time.Time) (dead bool, expired bool, err error) {
		select {
		case <-ctx.Done():
			return false, false, ctx.Err()
		case <-exited:
			return true, false, nil
		case <-ticker.C:
			return false, !deadline.IsZero() && time.Now().After(deadline), nil
		}
	}
	for {
		// Progress first: an incarnation killed before it decides anything would
		// never let the run drain.
		for progressed := false; !progressed; {
			dead, _, err := wait(time.Time{})
			if dead || err != nil {
				return death{self: dead}, err
			}
			n, err := w.decisions(ctx)
			if err != nil {
				return death{}, err
			}
			progressed, last = n > last, n
		}
		armed := time.Now().Add(between(cfg.Arm))
		for expired := false; !expired; {
			dead, exp, err := wait(armed)
			if dead || err != nil {
				return death{self: dead}, err
			}
			expired = exp
		}
		if last, err = w.decisions(ctx); err != nil {
			return death{}, err
		}
		deadline := time.Now().Add(cfg.Watch)
		for expired := false; !expired; {
			dead, exp, err := wait(deadline)
			if dead || err != nil {
				return death{self: dead}, err
			}
			n, err := w.decisions(ctx)
			if err != nil {
				return death{}, err
			}
			if n > last {
				return death{busy: true}, nil // within one poll of a decision's commit
			}
			expired = exp
		}
		lag, err := w.lag(ctx)
		if err != nil {
			return death{}, err
		}
		if lag > 0 {
			return death{}, nil
		}
	}
}

// decisions counts the consumer's decisions.
func (w *consumerWatch) decisions(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var n int
	if err := w.db.QueryRow(ctx, `SELECT count(*) FROM decisions`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count decisions: %w", err)
	}
	return n, nil
}

// A consumerSnapshot is the state a dead consumer left: how far its group had
// committed, how far the topic went, and which payments it had decided.
type consumerSnapshot struct {
	from, to map[int32]int64
	decided  map[string]bool
}

// lag counts the records of the topic beyond the group's committed offsets.
func (w *consumerWatch) lag(ctx context.Context) (int64, error) {
	snap, err := w.offsets(ctx)
	if err != nil {
		return 0, err
	}
	var lag int64
	for p, end := range snap.to {
		lag += end - snap.from[p]
	}
	return lag, nil
}

// snapshot reads a dead consumer's state; call it before the restart.
func (w *consumerWatch) snapshot(ctx context.Context) (consumerSnapshot, error) {
	snap, err := w.offsets(ctx)
	if err != nil {
		return snap, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := w.db.Query(ctx, `SELECT payment_id::text FROM decisions`)
	if err != nil {
		return snap, fmt.Errorf("read decisions: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return snap, fmt.Errorf("read decisions: %w", err)
	}
	snap.decided = make(map[string]bool, len(ids))
	for _, id := range ids {
		snap.decided[id] = true
	}
	return snap, nil
}

// offsets reads, per partition, the group's committed offset (the start offset where
// the group has committed nothing yet) and the end offset.
func (w *consumerWatch) offsets(ctx context.Context) (consumerSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	topic := w.rn.topic
	snap := consumerSnapshot{from: map[int32]int64{}, to: map[int32]int64{}}
	starts, err := w.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return snap, fmt.Errorf("list start offsets: %w", err)
	}
	ends, err := w.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return snap, fmt.Errorf("list end offsets: %w", err)
	}
	committed, err := w.adm.FetchOffsets(ctx, w.rn.group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return snap, fmt.Errorf("fetch offsets of group %s: %w", w.rn.group, err)
	}
	ends.Each(func(end kadm.ListedOffset) {
		from := int64(0)
		if start, ok := starts.Lookup(topic, end.Partition); ok {
			from = start.Offset
		}
		if c, ok := committed.Lookup(topic, end.Partition); ok && c.At >= from {
			from = c.At
		}
		snap.from[end.Partition], snap.to[end.Partition] = from, end.Offset
	})
	return snap, nil
}

// redelivered counts the records a restart hands the consumer again although their
// payment was already decided: records past the committed offsets, up to the end the
// topic had at the death, whose payment_id is in the decisions. Each is a death
// between a database commit and an offset commit, seen from outside.
func (w *consumerWatch) redelivered(ctx context.Context, snap consumerSnapshot) (int, error) {
	offsets := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	for p, end := range snap.to {
		if end > snap.from[p] {
			offsets[p] = kgo.NewOffset().At(snap.from[p])
			remaining[p] = end
		}
	}
	if len(remaining) == 0 {
		return 0, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(w.rn.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.rn.topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(250*time.Millisecond),
	)
	if err != nil {
		return 0, fmt.Errorf("new Kafka consumer: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n := 0
	for len(remaining) > 0 {
		// A transaction's control record may be the last offset of a partition and is
		// never returned: two seconds of silence mean only such markers were left.
		pollCtx, cancelPoll := context.WithTimeout(ctx, 2*time.Second)
		fetches := cl.PollFetches(pollCtx)
		cancelPoll()
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("re-read the uncommitted records: %d partitions unfinished: %w", len(remaining), err)
		}
		if pollCtx.Err() != nil && fetches.NumRecords() == 0 {
			break
		}
		fetches.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			var payload struct {
				PaymentID string `json:"payment_id"`
			}
			if json.Unmarshal(r.Value, &payload) == nil && snap.decided[payload.PaymentID] {
				n++
			}
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return n, nil
}
