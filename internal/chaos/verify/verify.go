package verify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config points the verifier at an implementation. Only what docs/contract.md
// promises is used, so it can judge a student's service as well as ours.
type Config struct {
	// PaymentsDB is the URL of the payments database (table payments; Schema lists
	// the optional ones). Required.
	PaymentsDB string
	// ConsumerDB is the URL of the consumer's database (tables decisions and
	// user_totals). Optional: without it, "lost" means only "no event in the topic", and
	// the verdict shows the consumer's checks as off.
	ConsumerDB string
	// Brokers to read the topic from: the DIRECT listener, never the proxy. Required.
	Brokers []string
	// KafkaOpts reach Brokers besides the address: TLS, SASL. Optional.
	KafkaOpts []kgo.Opt
	// Topic of payment events. Required.
	Topic string
	// Partitions is the partition count the topic must have. Default 3, as the
	// contract and both stacks create it.
	Partitions int
	// DrainTimeout bounds the wait for the outbox to empty. Default 5 min, the SLO.
	DrainTimeout time.Duration
	// DecisionTimeout bounds the wait for the consumer to decide every payment whose
	// event is in the topic. Default 2 min.
	DecisionTimeout time.Duration
	// Foreign are records the harness wrote to the topic itself (hostile-records), left
	// out of what the verifier reads. Optional.
	Foreign *ForeignRecords
}

func (c Config) withDefaults() Config {
	c.Partitions = cmp.Or(c.Partitions, 3)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, 5*time.Minute)
	c.DecisionTimeout = cmp.Or(c.DecisionTimeout, 2*time.Minute)
	return c
}

// Validate reports what is missing, in the words of the command-line flags.
func (c Config) Validate() error {
	switch {
	case c.PaymentsDB == "":
		return errors.New("verify: the payments database URL is required (-payments-db)")
	case len(c.Brokers) == 0:
		return errors.New("verify: Kafka brokers are required (-brokers, the direct listener)")
	case c.Topic == "":
		return errors.New("verify: the topic is required (-topic)")
	}
	return nil
}

// A Verifier reads the databases and the topic of one run.
type Verifier struct {
	cfg      Config
	payments *pgxpool.Pool
	consumer *pgxpool.Pool // nil without ConsumerDB
}

// New connects to the databases. Close it when done.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Verifier{cfg: cfg}
	var err error
	if v.payments, err = pgxpool.New(ctx, cfg.PaymentsDB); err != nil {
		return nil, fmt.Errorf("connect to the payments database: %w", err)
	}
	if cfg.ConsumerDB != "" {
		if v.consumer, err = pgxpool.New(ctx, cfg.ConsumerDB); err != nil {
			v.payments.Close()
			return nil, fmt.Errorf("connect to the consumer database: %w", err)
		}
	}
	return v, nil
}

// Close closes the connection pools.
func (v *Verifier) Close() {
	v.payments.Close()
	if v.consumer != nil {
		v.consumer.Close()
	}
}

// WaitDrain waits until nothing is left to publish and returns the seconds since
// loadEnded, or -1 and an error when DrainTimeout passes first. With an outbox_events
// table, "nothing left" is no row in status pending; without one (a black-box
// implementation) it is every committed payment having an event in the topic.
func (v *Verifier) WaitDrain(ctx context.Context, loadEnded time.Time) (float64, error) {
	ctx, cancel := context.WithDeadline(ctx, loadEnded.Add(v.cfg.DrainTimeout))
	defer cancel()
	hasOutbox, err := HasColumn(ctx, v.payments, "outbox_events", "status")
	if err != nil {
		return -1, err
	}
	for {
		var left int
		if hasOutbox {
			err = v.payments.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'pending'`).Scan(&left)
		} else {
			left, err = v.unpublishedPayments(ctx)
		}
		if err == nil && left == 0 {
			return time.Since(loadEnded).Seconds(), nil
		}
		// Errors are retried: the database may be restarting (db-restart scenario).
		// A tenth of a second: drain_seconds is that precise, and the warm-up's payments,
		// one after another, each wait for this.
		if werr := backoff.Until(ctx, time.Now().Add(100*time.Millisecond)); werr != nil {
			return -1, fmt.Errorf("wait for the outbox to drain: %d events left (last error: %v): %w", left, err, werr)
		}
	}
}

// unpublishedPayments counts committed payments with no event in the topic yet.
func (v *Verifier) unpublishedPayments(ctx context.Context) (int, error) {
	committed, err := v.committedPayments(ctx)
	if err != nil {
		return 0, err
	}
	topic, err := ReadTopicExcept(ctx, v.cfg.Brokers, v.cfg.Topic, v.cfg.Foreign, v.cfg.KafkaOpts...)
	if err != nil {
		return 0, err
	}
	left := 0
	for id := range committed {
		if topic.PaymentEvents[id] == 0 {
			left++
		}
	}
	return left, nil
}

// Observe reads the committed payments, the whole topic and, once the consumer has
// caught up with the topic (bounded by DecisionTimeout), its decisions and totals. A
// table the contract names but the service lacks is not an error: Schema records it
// and the verdict shows the check it turns off (or fails, for a table the contract
// requires).
func (v *Verifier) Observe(ctx context.Context) (Observed, error) {
	obs := Observed{ConsumerDuplicates: -1, ConsumerOwnViolations: -1, ExpectedPartitions: v.cfg.Partitions}
	var err error
	if obs.Schema, err = v.schema(ctx); err != nil {
		return obs, err
	}
	if obs.Committed, err = v.committedPayments(ctx); err != nil {
		return obs, err
	}
	if obs.Schema.PaymentLifecycle {
		if obs.Lifecycles, err = v.committedLifecycles(ctx); err != nil {
			return obs, err
		}
	}
	readCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	obs.Topic, err = ReadTopicExcept(readCtx, v.cfg.Brokers, v.cfg.Topic, v.cfg.Foreign, v.cfg.KafkaOpts...)
	cancel()
	if err != nil {
		return obs, err
	}
	if obs.DLQ, err = v.dlq(ctx, obs.Schema); err != nil {
		return obs, err
	}
	if v.consumer == nil || !obs.Schema.Decisions {
		return obs, nil
	}
	decided, waitErr := v.waitDecisions(ctx, obs.Topic.PaymentEvents, obs.Schema.DecisionEventIDs)
	if waitErr != nil {
		// Not an error of the run: the payments still undecided count as lost.
		obs.Notes = append(obs.Notes, waitErr.Error())
	}
	if decided.rows == nil {
		return obs, errors.New("read decisions: no answer from the consumer database")
	}
	obs.Decisions, obs.DecisionEvents = decided.rows, decided.eventIDs
	if obs.ConsumerDuplicates = v.consumerDuplicates(ctx); obs.ConsumerDuplicates < 0 {
		obs.Notes = append(obs.Notes, "consumer_duplicates_seen off: processed_events keeps no delivery count (a MAY of the contract)")
	}
	if obs.Schema.ConsumerOrder {
		if obs.ConsumerOrder, obs.ConsumerOwnViolations, err = v.consumerOrder(ctx, obs.Schema); err != nil {
			return obs, err
		}
	}
	if obs.Schema.UserTotals {
		obs.ExpectedTotals, obs.ConsumerTotals, err = v.totals(ctx, obs.Committed, obs.Schema.PaymentLifecycle)
	}
	return obs, err
}

// decisionRows are the consumer's decision rows, per payment id: how many, and the
// event id of one of them (eventIDs is nil when the table has no event_id column).
type decisionRows struct {
	rows     map[string]int
	eventIDs map[string]string
}

// waitDecisions polls the decisions until every payment with an event in the topic
// has one, or DecisionTimeout passes; it returns the last decisions read either way.
func (v *Verifier) waitDecisions(ctx context.Context, inTopic map[string]int, withEventIDs bool) (decisionRows, error) {
	ctx, cancel := context.WithTimeout(ctx, v.cfg.DecisionTimeout)
	defer cancel()
	var last decisionRows
	for {
		decided, err := v.decisions(ctx, withEventIDs)
		if err == nil {
			last = decided
			missing := 0
			for id := range inTopic {
				if decided.rows[id] == 0 {
					missing++
				}
			}
			if missing == 0 {
				return decided, nil
			}
			err = fmt.Errorf("%d payments in the topic have no decision yet", missing)
		}
		if werr := backoff.Until(ctx, time.Now().Add(time.Second)); werr != nil {
			return last, fmt.Errorf("wait for decisions: %w", err)
		}
	}
}

// committedPayments returns every row of payments, by id.
func (v *Verifier) committedPayments(ctx context.Context) (map[string]PaymentFields, error) {
	// The casts let an implementation choose its column types (numeric, varchar).
	rows, err := v.payments.Query(ctx, `SELECT id::text, user_id::text, amount::bigint, trim(currency::text) FROM payments`)
	if err != nil {
		return nil, fmt.Errorf("read committed payments: %w", err)
	}
	committed := map[string]PaymentFields{}
	var id string
	var p PaymentFields
	_, err = pgx.ForEachRow(rows, []any{&id, &p.UserID, &p.Amount, &p.Currency}, func() error {
		committed[id] = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read committed payments: %w", err)
	}
	return committed, nil
}

// decisions counts the raw decision rows per payment: a UNIQUE constraint should make
// every count 1, and the verifier checks rather than trusts it.
func (v *Verifier) decisions(ctx context.Context, withEventIDs bool) (decisionRows, error) {
	eventID := "NULL"
	if withEventIDs {
		eventID = "min(event_id::text)"
	}
	rows, err := v.consumer.Query(ctx, `SELECT payment_id::text, count(*), `+eventID+` FROM decisions GROUP BY 1`)
	if err != nil {
		return decisionRows{}, fmt.Errorf("read decisions: %w", err)
	}
	decided := decisionRows{rows: map[string]int{}}
	if withEventIDs {
		decided.eventIDs = map[string]string{}
	}
	var id string
	var n int
	var event *string
	_, err = pgx.ForEachRow(rows, []any{&id, &n, &event}, func() error {
		decided.rows[id] = n
		if event != nil {
			decided.eventIDs[id] = *event
		}
		return nil
	})
	if err != nil {
		return decisionRows{}, fmt.Errorf("read decisions: %w", err)
	}
	return decided, nil
}

// dlq counts dead-lettered events: rows in outbox_dlq, or outbox rows given up on
// ('failed'), whichever is more. An implementation may keep either record or both (ours
// marks the row 'failed' and copies it to outbox_dlq in one statement), so adding the two
// would count one event twice. With neither table the count is 0 and the verdict shows
// the dead-letter check as off. A row of outbox_dlq with replayed_at set was sent back
// for delivery by an operator (the poison scenario's replay) and is history, not a
// dead letter.
func (v *Verifier) dlq(ctx context.Context, schema Schema) (int, error) {
	dlqQuery := `SELECT count(*) FROM outbox_dlq`
	if schema.DLQReplayedAt {
		dlqQuery += ` WHERE replayed_at IS NULL`
	}
	most := 0
	for _, table := range []struct {
		present bool
		name    string
		query   string
	}{
		{schema.OutboxDLQ, "outbox_dlq", dlqQuery},
		{schema.OutboxEvents, "outbox_events", `SELECT count(*) FROM outbox_events WHERE status = 'failed'`},
	} {
		if !table.present {
			continue
		}
		var n int
		if err := v.payments.QueryRow(ctx, table.query).Scan(&n); err != nil {
			return 0, fmt.Errorf("count dead letters in %s: %w", table.name, err)
		}
		most = max(most, n)
	}
	return most, nil
}

// consumerDuplicates reads the consumer's own count of duplicate deliveries from its
// dedup table, when it keeps one in the one column the contract names:
// processed_events.deliveries, every delivery of the event id, the first included. It
// returns -1 when there is no such column: the count is a MAY of the contract, shown
// beside the harness's own evidence and never judged.
func (v *Verifier) consumerDuplicates(ctx context.Context) int {
	var n int
	err := v.consumer.QueryRow(ctx, `SELECT coalesce(sum(deliveries - 1), 0) FROM processed_events`).Scan(&n)
	if err != nil {
		return -1
	}
	return n
}
