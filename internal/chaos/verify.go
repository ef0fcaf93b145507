package chaos

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// VerifyConfig points the verifier at an implementation. Only what docs/contract.md
// promises is used, so it can judge a student's service as well as ours.
type VerifyConfig struct {
	// PaymentsDB is the URL of the payments database (table payments; outbox_events
	// and outbox_dlq are used when they exist). Required.
	PaymentsDB string
	// ConsumerDB is the URL of the consumer's database (table decisions). Optional:
	// without it, "lost" means only "no event in the topic".
	ConsumerDB string
	// Brokers to read the topic from: the DIRECT listener, never the proxy. Required.
	Brokers []string
	// Topic of payment events. Required.
	Topic string
	// DrainTimeout bounds the wait for the outbox to empty. Default 5 min, the SLO.
	DrainTimeout time.Duration
	// DecisionTimeout bounds the wait for the consumer to decide every payment whose
	// event is in the topic. Default 2 min.
	DecisionTimeout time.Duration
}

func (c VerifyConfig) withDefaults() VerifyConfig {
	c.DrainTimeout = cmp.Or(c.DrainTimeout, 5*time.Minute)
	c.DecisionTimeout = cmp.Or(c.DecisionTimeout, 2*time.Minute)
	return c
}

// Validate reports what is missing, in the words of the command-line flags.
func (c VerifyConfig) Validate() error {
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
	cfg      VerifyConfig
	payments *pgxpool.Pool
	consumer *pgxpool.Pool // nil without ConsumerDB
}

// NewVerifier connects to the databases. Close it when done.
func NewVerifier(ctx context.Context, cfg VerifyConfig) (*Verifier, error) {
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
	hasOutbox, err := v.tableExists(ctx, "outbox_events")
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
		if werr := waitUntil(ctx, time.Now().Add(time.Second)); werr != nil {
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
	topic, err := ReadTopic(ctx, v.cfg.Brokers, v.cfg.Topic)
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

// Observed is what the verifier found after the drain.
type Observed struct {
	Committed map[string]bool
	Topic     TopicContents
	// Decisions counts decision rows per payment id; nil without a consumer database.
	Decisions map[string]int
	DLQ       int
	// ConsumerDuplicates from the consumer's dedup table, -1 if it keeps no count.
	ConsumerDuplicates int
	// ExpectedTotals are the running totals of the committed payments that have a
	// decision, per user and currency; ConsumerTotals are the consumer's user_totals rows
	// (see totals.go). Both nil when the check is off.
	ExpectedTotals, ConsumerTotals map[UserCurrency]RunningTotal
	Notes                          []string
}

// Observe reads the committed payments, the whole topic and, once the consumer has
// caught up with the topic (bounded by DecisionTimeout), its decisions.
func (v *Verifier) Observe(ctx context.Context) (Observed, error) {
	obs := Observed{ConsumerDuplicates: -1}
	var err error
	if obs.Committed, err = v.committedPayments(ctx); err != nil {
		return obs, err
	}
	readCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	obs.Topic, err = ReadTopic(readCtx, v.cfg.Brokers, v.cfg.Topic)
	cancel()
	if err != nil {
		return obs, err
	}
	if obs.Topic.Malformed > 0 {
		obs.Notes = append(obs.Notes, fmt.Sprintf("%d records without an X-Event-Id header or a payment_id (contract violation)", obs.Topic.Malformed))
	}
	if obs.DLQ, err = v.dlq(ctx); err != nil {
		return obs, err
	}
	if v.consumer == nil {
		obs.Notes = append(obs.Notes, "no consumer database given: decisions not checked")
		return obs, nil
	}
	if obs.Decisions, err = v.waitDecisions(ctx, obs.Topic.PaymentEvents); err != nil {
		obs.Notes = append(obs.Notes, err.Error())
	}
	if obs.Decisions == nil {
		return obs, errors.New("read decisions: no answer from the consumer database")
	}
	obs.ConsumerDuplicates = v.consumerDuplicates(ctx)
	var note string
	if obs.ExpectedTotals, obs.ConsumerTotals, note, err = v.totals(ctx, obs.Committed); err != nil {
		return obs, err
	}
	if note != "" {
		obs.Notes = append(obs.Notes, note)
	}
	return obs, nil
}

// waitDecisions polls the decisions until every payment with an event in the topic
// has one, or DecisionTimeout passes; it returns the last decisions read either way.
func (v *Verifier) waitDecisions(ctx context.Context, inTopic map[string]int) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, v.cfg.DecisionTimeout)
	defer cancel()
	var last map[string]int
	for {
		decisions, err := v.decisions(ctx)
		if err == nil {
			last = decisions
			missing := 0
			for id := range inTopic {
				if decisions[id] == 0 {
					missing++
				}
			}
			if missing == 0 {
				return decisions, nil
			}
			err = fmt.Errorf("%d payments in the topic have no decision yet", missing)
		}
		if werr := waitUntil(ctx, time.Now().Add(time.Second)); werr != nil {
			return last, fmt.Errorf("wait for decisions: %w", err)
		}
	}
}

// committedPayments returns the id of every row in payments.
func (v *Verifier) committedPayments(ctx context.Context) (map[string]bool, error) {
	rows, err := v.payments.Query(ctx, `SELECT id::text FROM payments`)
	if err != nil {
		return nil, fmt.Errorf("read committed payments: %w", err)
	}
	committed := map[string]bool{}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { committed[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("read committed payments: %w", err)
	}
	return committed, nil
}

// decisions counts the raw decision rows per payment: a UNIQUE constraint should make
// every count 1, and the verifier checks rather than trusts it.
func (v *Verifier) decisions(ctx context.Context) (map[string]int, error) {
	rows, err := v.consumer.Query(ctx, `SELECT payment_id::text, count(*) FROM decisions GROUP BY 1`)
	if err != nil {
		return nil, fmt.Errorf("read decisions: %w", err)
	}
	decisions := map[string]int{}
	var id string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { decisions[id] = n; return nil }); err != nil {
		return nil, fmt.Errorf("read decisions: %w", err)
	}
	return decisions, nil
}

// dlq counts dead-lettered events: rows in outbox_dlq, or outbox rows given up on
// ('failed'), whichever is more. An implementation may keep either record or both (ours
// marks the row 'failed' and copies it to outbox_dlq in one statement), so adding the two
// would count one event twice. Tables a black-box implementation does not have count
// as zero.
func (v *Verifier) dlq(ctx context.Context) (int, error) {
	most := 0
	for table, query := range map[string]string{
		"outbox_dlq":    `SELECT count(*) FROM outbox_dlq`,
		"outbox_events": `SELECT count(*) FROM outbox_events WHERE status = 'failed'`,
	} {
		ok, err := v.tableExists(ctx, table)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		var n int
		if err := v.payments.QueryRow(ctx, query).Scan(&n); err != nil {
			return 0, fmt.Errorf("count dead letters in %s: %w", table, err)
		}
		most = max(most, n)
	}
	return most, nil
}

// consumerDuplicates reads the consumer's own count of duplicate deliveries from its
// dedup table, when the table has a column that keeps one; -1 otherwise.
func (v *Verifier) consumerDuplicates(ctx context.Context) int {
	for _, column := range []string{"duplicates", "duplicate_count", "redeliveries"} {
		var n int
		err := v.consumer.QueryRow(ctx, `SELECT coalesce(sum(`+column+`), 0) FROM processed_events`).Scan(&n)
		if err == nil {
			return n
		}
	}
	for _, column := range []string{"deliveries", "delivery_count", "times_seen"} {
		var n int
		err := v.consumer.QueryRow(ctx, `SELECT coalesce(sum(`+column+` - 1), 0) FROM processed_events`).Scan(&n)
		if err == nil {
			return n
		}
	}
	return -1
}

// tableExists reports whether the payments database has table.
func (v *Verifier) tableExists(ctx context.Context, table string) (bool, error) {
	var ok bool
	err := v.payments.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look up table %s: %w", table, err)
	}
	return ok, nil
}

// Fill computes the report's counts from what was observed and what the clients saw.
func (o Observed) Fill(r *Report) {
	r.PaymentsCommitted = len(o.Committed)
	r.EventsInTopic = o.Topic.Records
	r.UniqueEventsInTopic = o.Topic.Unique()
	r.DuplicatesDelivered = 0
	for _, n := range o.Topic.EventCopies {
		r.DuplicatesDelivered += n - 1
	}
	r.DLQ = o.DLQ
	r.ConsumerDuplicates = o.ConsumerDuplicates
	r.Notes = append(r.Notes, o.Notes...)

	r.Lost, r.LostNoEvent, r.LostNoDecision, r.Phantom, r.DuplicateEffects, r.Decisions = 0, 0, 0, 0, 0, 0
	for id := range o.Committed {
		noEvent := o.Topic.PaymentEvents[id] == 0
		noDecision := o.Decisions != nil && o.Decisions[id] == 0
		if noEvent {
			r.LostNoEvent++
		}
		if noDecision {
			r.LostNoDecision++
		}
		if noEvent || noDecision {
			r.Lost++
		}
	}
	phantom := map[string]bool{}
	for id := range o.Topic.PaymentEvents {
		if !o.Committed[id] {
			phantom[id] = true
		}
	}
	for id, n := range o.Decisions {
		r.Decisions += n
		if n > 1 {
			r.DuplicateEffects++
		}
		if !o.Committed[id] {
			phantom[id] = true
		}
	}
	r.Phantom = len(phantom)
	o.fillTotals(r)
}

// ScrapeCounter sums every sample of the named metrics in a Prometheus text exposition
// at url (all label sets). ok is false when none of the metrics is exposed.
func ScrapeCounter(ctx context.Context, url string, names ...string) (sum int, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, fmt.Errorf("scrape %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("scrape %s: status %d", url, resp.StatusCode)
	}
	var total float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		for _, want := range names {
			if name != want {
				continue
			}
			// With labels the value follows the closing brace.
			if i := strings.LastIndex(line, "}"); i >= 0 {
				rest = line[i+1:]
			}
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				continue
			}
			if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
				total += v
				ok = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("scrape %s: %w", url, err)
	}
	return int(total), ok, nil
}
