package crash

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/event"
)

// A consumerWatch looks at a consumer from outside, through the names of the contract
// only: its decisions table, its consumer group's committed offsets and the topic. It
// tells crashConsumer when to kill, and what each death leaves for the restart to
// redeliver, without reading anything the consumer reports about itself.
type consumerWatch struct {
	rn   *harness.Run
	db   *pgx.Conn
	kcl  *kgo.Client
	adm  *kadm.Client
	poll time.Duration
	// starts are the topic's start offsets per partition, read once.
	starts map[int32]int64
	// hasProcessed says whether the consumer keeps a processed_events table (a MAY of
	// the contract), which probe compares with its committed offsets and decisions.
	hasProcessed bool
}

// newConsumerWatch connects to the consumer's database and to Kafka's DIRECT listener.
func newConsumerWatch(ctx context.Context, rn *harness.Run) (*consumerWatch, error) {
	if rn.Group == "" {
		return nil, fmt.Errorf("watch the consumer: no consumer group known (the harness must start the consumer)")
	}
	db, err := pgx.Connect(ctx, rn.ConsumerDB)
	if err != nil {
		return nil, fmt.Errorf("connect to the consumer database: %w", err)
	}
	kcl, err := kgo.NewClient(kgo.SeedBrokers(rn.Brokers...))
	if err != nil {
		db.Close(ctx)
		return nil, fmt.Errorf("new Kafka client: %w", err)
	}
	w := &consumerWatch{rn: rn, db: db, kcl: kcl, adm: kadm.NewClient(kcl), poll: 10 * time.Millisecond}
	snap, err := w.offsets(ctx)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.starts = snap.Start
	if err := db.QueryRow(ctx, `SELECT to_regclass('processed_events') IS NOT NULL`).Scan(&w.hasProcessed); err != nil {
		w.Close()
		return nil, fmt.Errorf("look up processed_events: %w", err)
	}
	return w, nil
}

// Close releases the connections.
func (w *consumerWatch) Close() {
	w.kcl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	w.db.Close(ctx)
}

// untilWorthKilling waits until the current incarnation has made a decision, then a
// random cfg.Arm, then probes it for up to cfg.Watch: it freezes the consumer
// (SIGSTOP), and if the decisions committed so far outnumber the records its group has
// committed, the consumer stands between a database commit and its offset commit, and
// it is left frozen for the kill (caught). Otherwise it is thawed and probed again a
// poll later. When Watch ends without a catch, the kill comes at that random point if
// records still wait for the consumer; a consumer that has caught up is left alone
// until new records make it decide again. It returns early, with self set, if the
// consumer dies by itself.
func (w *consumerWatch) untilWorthKilling(ctx context.Context, cfg consumerCrashes) (death, error) {
	exited := w.rn.Consumer.Exited()
	last, err := w.decisions(ctx)
	if err != nil {
		return death{}, err
	}
	polls := time.NewTicker(w.poll)
	defer polls.Stop()
	// Probes come much closer together than polls: the consumer runs only between two
	// freezes, and the moment a probe must catch lasts about one broker round trip.
	probes := time.NewTicker(time.Millisecond)
	defer probes.Stop()
	// wait waits for the next tick of ticker; it reports a death of the consumer, or
	// ctx's end.
	wait := func(ticker *time.Ticker) (dead bool, err error) {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-exited:
			return true, nil
		case <-ticker.C:
			return false, nil
		}
	}
	tick := func() (bool, error) { return wait(polls) }
	for {
		// Progress first: an incarnation killed before it decides anything would
		// never let the run drain.
		for progressed := false; !progressed; {
			if dead, err := tick(); dead || err != nil {
				return death{self: dead}, err
			}
			n, err := w.decisions(ctx)
			if err != nil {
				return death{}, err
			}
			progressed, last = n > last, n
		}
		for armed := time.Now().Add(harness.Between(cfg.Arm)); time.Now().Before(armed); {
			if dead, err := tick(); dead || err != nil {
				return death{self: dead}, err
			}
		}
		for deadline := time.Now().Add(cfg.Watch); time.Now().Before(deadline); {
			if dead, err := wait(probes); dead || err != nil {
				return death{self: dead}, err
			}
			caught, err := w.probe(ctx)
			if caught || err != nil {
				return death{caught: caught}, err
			}
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

// probe freezes the consumer and tells whether it stands between two of its commits,
// where a kill tests the order of its writes. A payment has several events, so the
// decisions (one per payment) do not count the records; the dedup rows do, and they
// say where each event was read (processed_events.partition and offset):
//
//   - its dedup rows reach beyond its group's committed offset on some partition: it is
//     between its database commit and its offset commit, where a correct consumer gets
//     its batch redelivered;
//   - its committed offset is beyond its last dedup row: a consumer that commits offsets
//     first, which a kill there makes lose the batch (a trailing copy or poison record,
//     which adds no dedup row, makes this a harmless instant now and then: a kill there
//     is as legitimate as any other);
//   - it has dedup rows of payments it has no decision for: a consumer that commits them
//     in two transactions.
//
// The dedup table is a MAY of the contract: without processed_events the kills stay at
// random points only. A caught consumer stays frozen; any other is thawed before probe
// returns.
func (w *consumerWatch) probe(ctx context.Context) (caught bool, err error) {
	if !w.hasProcessed {
		return false, nil
	}
	if err := w.rn.Consumer.Freeze(); err != nil {
		return false, err
	}
	defer func() {
		if !caught {
			if thawErr := w.rn.Consumer.Thaw(); thawErr != nil && err == nil {
				err = thawErr
			}
		}
	}()
	committed, err := w.committedOffsets(ctx)
	if err != nil {
		return false, err
	}
	processed, undecided, err := w.processedThrough(ctx)
	if err != nil {
		return false, err
	}
	if undecided > 0 {
		return true, nil
	}
	for p, next := range processed {
		if next != committed[p] {
			return true, nil
		}
	}
	for p, at := range committed {
		if _, ok := processed[p]; !ok && at > w.starts[p] {
			return true, nil // offsets committed on a partition with no dedup row
		}
	}
	return false, nil
}

// processedThrough returns, per partition, the offset after the last dedup row, and, in
// the same snapshot, how many payments have dedup rows but no decision.
func (w *consumerWatch) processedThrough(ctx context.Context) (next map[int32]int64, undecided int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	tx, err := w.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, 0, fmt.Errorf("read the consumer's dedup rows: %w", err)
	}
	defer tx.Rollback(ctx) // read only
	rows, err := tx.Query(ctx, `SELECT partition, max("offset") + 1 FROM processed_events GROUP BY partition`)
	if err != nil {
		return nil, 0, fmt.Errorf("read the consumer's dedup rows: %w", err)
	}
	next = map[int32]int64{}
	var p int32
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &n}, func() error { next[p] = n; return nil }); err != nil {
		return nil, 0, fmt.Errorf("read the consumer's dedup rows: %w", err)
	}
	err = tx.QueryRow(ctx, `
		SELECT count(DISTINCT e.payment_id) FROM processed_events e
		WHERE NOT EXISTS (SELECT 1 FROM decisions d WHERE d.payment_id = e.payment_id)`).Scan(&undecided)
	if err != nil {
		return nil, 0, fmt.Errorf("count payments without a decision: %w", err)
	}
	return next, undecided, nil
}

// committedOffsets reads the group's committed offset per partition of the run's topic.
// It is one round trip to the broker, so that a probe keeps the consumer frozen briefly.
func (w *consumerWatch) committedOffsets(ctx context.Context) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	committed, err := w.adm.FetchOffsets(ctx, w.rn.Group)
	if err == nil {
		err = committed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", w.rn.Group, err)
	}
	out := map[int32]int64{}
	committed.Each(func(c kadm.OffsetResponse) {
		if c.Topic == w.rn.Topic {
			out[c.Partition] = c.At
		}
	})
	return out, nil
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
	harness.GroupOffsets
	decided map[string]bool
	// processed holds the event ids of the consumer's dedup rows; nil without
	// processed_events.
	processed map[string]bool
}

// lag counts the records of the topic beyond the group's committed offsets.
func (w *consumerWatch) lag(ctx context.Context) (int64, error) {
	snap, err := w.offsets(ctx)
	return snap.Lag(), err
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
	if !w.hasProcessed {
		return snap, nil
	}
	rows, err = w.db.Query(ctx, `SELECT event_id::text FROM processed_events`)
	if err != nil {
		return snap, fmt.Errorf("read processed events: %w", err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return snap, fmt.Errorf("read processed events: %w", err)
	}
	snap.processed = make(map[string]bool, len(ids))
	for _, id := range ids {
		snap.processed[id] = true
	}
	return snap, nil
}

// offsets reads the consumer group's offsets; see ReadGroupOffsets.
func (w *consumerWatch) offsets(ctx context.Context) (consumerSnapshot, error) {
	offsets, err := harness.ReadGroupOffsets(ctx, w.adm, w.rn.Topic, w.rn.Group)
	return consumerSnapshot{GroupOffsets: offsets}, err
}

// redelivered counts the records a restart hands the consumer again although it had
// already processed them: records past the committed offsets, up to the end the topic
// had at the death, whose X-Event-Id is in its dedup rows (without processed_events: a
// PaymentCreated whose payment is in the decisions). Each is a death between a
// database commit and an offset commit, seen from outside.
func (w *consumerWatch) redelivered(ctx context.Context, snap consumerSnapshot) (int, error) {
	offsets := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	for p, end := range snap.To {
		if end > snap.From[p] {
			offsets[p] = kgo.NewOffset().At(snap.From[p])
			remaining[p] = end
		}
	}
	if len(remaining) == 0 {
		return 0, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(w.rn.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{w.rn.Topic: offsets}),
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
			if snap.processedBefore(r) {
				n++
			}
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return n, nil
}

// processedBefore reports whether the dead consumer had processed r's event.
func (s consumerSnapshot) processedBefore(r *kgo.Record) bool {
	if s.processed != nil {
		return s.processed[headerValue(r, event.HeaderID)]
	}
	if headerValue(r, event.HeaderType) != event.TypePaymentCreated {
		return false
	}
	var payload struct {
		PaymentID string `json:"payment_id"`
	}
	return json.Unmarshal(r.Value, &payload) == nil && s.decided[payload.PaymentID]
}

// headerValue returns the value of r's header key, or "".
func headerValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
