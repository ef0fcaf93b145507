package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// sampleEvery is how often the sampler looks at the run: a few samples per second
// show a 4-second fault window with its edges, and cost the stack a handful of small
// queries and scrapes per second.
const sampleEvery = 300 * time.Millisecond

// sourceTimeout bounds every read of one sample. A frozen API (relay-crash freezes it
// before a kill) never answers its /metrics; the sample must not wait for it.
const sourceTimeout = 500 * time.Millisecond

// A sampler records a Timeline of the run from outside: the databases, the topic and
// the services' /metrics, the same sources the verifier reads at the end. It owns one
// goroutine, which Stop ends.
type sampler struct {
	rn       *Run
	payments *pgxpool.Pool
	consumer *pgxpool.Pool // nil without a consumer database
	kafka    *kgo.Client
	admin    *kadm.Client

	// The totals, owned by the goroutine: each survives its process's restarts.
	published, failures, duplicates totalCounter

	done    chan struct{}
	stop    context.CancelFunc
	samples []verdict.Sample // written by the goroutine, read after done
}

// startSampler connects to the run's sources and starts sampling.
func startSampler(ctx context.Context, rn *Run) (*sampler, error) {
	s, err := newSampler(ctx, rn)
	if err != nil {
		return nil, err
	}
	ctx, s.stop = context.WithCancel(ctx)
	go s.loop(ctx)
	return s, nil
}

// newSampler connects to the run's sources. Pools, not single connections: they
// reconnect by themselves after db-restart kills the server.
func newSampler(ctx context.Context, rn *Run) (*sampler, error) {
	s := &sampler{rn: rn, done: make(chan struct{})}
	var err error
	if s.payments, err = pgxpool.New(ctx, rn.PaymentsDB); err != nil {
		return nil, fmt.Errorf("sampler: connect to the payments database: %w", err)
	}
	if rn.ConsumerDB != "" {
		if s.consumer, err = pgxpool.New(ctx, rn.ConsumerDB); err != nil {
			s.payments.Close()
			return nil, fmt.Errorf("sampler: connect to the consumer database: %w", err)
		}
	}
	if s.kafka, err = kafkasec.NewClient(rn.Brokers, rn.KafkaOpts); err != nil {
		s.closeSources()
		return nil, fmt.Errorf("sampler: new Kafka client: %w", err)
	}
	s.admin = kadm.NewClient(s.kafka)
	return s, nil
}

// Stop ends the sampling and returns the timeline.
func (s *sampler) Stop() *verdict.Timeline {
	s.stop()
	<-s.done
	s.closeSources()
	return &verdict.Timeline{IntervalS: sampleEvery.Seconds(), Samples: s.samples}
}

func (s *sampler) closeSources() {
	if s.kafka != nil {
		s.kafka.Close()
		s.kafka = nil
	}
	if s.consumer != nil {
		s.consumer.Close()
		s.consumer = nil
	}
	if s.payments != nil {
		s.payments.Close()
		s.payments = nil
	}
}

func (s *sampler) loop(ctx context.Context) {
	defer close(s.done)
	ticker := time.NewTicker(sampleEvery)
	defer ticker.Stop()
	// The reads do not end with the sampling: the samples are finished, each read
	// bounded by sourceTimeout, so a timeline is never empty.
	reads := context.WithoutCancel(ctx)
	for {
		s.samples = append(s.samples, s.sampleOnce(reads))
		select {
		case <-ctx.Done():
			// One last sample at the end, whenever it comes: the dual write logs the
			// failures of its last window's publishes a moment after the load has been
			// answered, and the chart must end on the count the report judges.
			s.samples = append(s.samples, s.sampleOnce(reads))
			return
		case <-ticker.C:
		}
	}
}

// sampleOnce reads every source once. A source that fails is recorded as unknown (or
// keeps its total, see Sample) and does not stop the sampling: the faults the run
// injects are the very reason some reads fail.
func (s *sampler) sampleOnce(ctx context.Context) verdict.Sample {
	at := time.Since(s.rn.Origin).Seconds()
	// The decisions are counted before the payments: the two live in two databases,
	// which no one query reads, and a decision follows its payment's commit, so read in
	// this order the payments not decided yet (the difference) are never negative.
	decisions := s.count(ctx, s.consumer, `SELECT count(*) FROM decisions`)
	smp := verdict.Sample{
		AtS:               at,
		PaymentsCommitted: s.count(ctx, s.payments, `SELECT count(*) FROM payments`),
		OutboxPending:     s.count(ctx, s.payments, `SELECT count(*) FROM outbox_events WHERE status = 'pending'`),
		TopicRecords:      s.topicRecords(ctx),
		Decisions:         decisions,
		DualWriteGivenUp:  -1,
	}
	smp.DuplicatesAbsorbed = s.duplicates.observe(s.count(ctx, s.consumer, `SELECT coalesce(sum(deliveries - 1), 0) FROM processed_events`))
	if s.rn.dualWrite {
		// The teaching mode has no metrics: its failures are lines in its log, and
		// it never publishes those events again.
		n, ok := s.rn.scrapeFailures()
		smp.PublishFailures = s.failures.observe(unknownUnless(n, ok))
		smp.DualWriteGivenUp = smp.PublishFailures
		smp.Published = -1
		return smp
	}
	smp.Published = s.published.observe(s.scrape(ctx, s.rn.API.MetricsBase(), "outbox_published_total"))
	smp.PublishFailures = s.failures.observe(s.scrape(ctx, s.rn.API.MetricsBase(), "outbox_publish_failures_total"))
	return smp
}

// count runs a count query under the source timeout; -1 if it failed.
func (s *sampler) count(ctx context.Context, db *pgxpool.Pool, query string) int {
	if db == nil {
		return -1
	}
	ctx, cancel := context.WithTimeout(ctx, sourceTimeout)
	defer cancel()
	var n int
	if err := db.QueryRow(ctx, query).Scan(&n); err != nil {
		return -1
	}
	return n
}

// topicRecords sums the end offsets of the topic's partitions; -1 if unknown.
func (s *sampler) topicRecords(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, sourceTimeout)
	defer cancel()
	ends, err := s.admin.ListEndOffsets(ctx, s.rn.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return -1
	}
	total := 0
	ends.Each(func(o kadm.ListedOffset) { total += int(o.Offset) })
	return total
}

// scrape reads one counter of a service's /metrics; -1 if it did not answer or has
// no such counter.
func (s *sampler) scrape(ctx context.Context, baseURL, name string) int {
	if baseURL == "" {
		return -1
	}
	ctx, cancel := context.WithTimeout(ctx, sourceTimeout)
	defer cancel()
	n, ok, err := ScrapeCounter(ctx, baseURL+"/metrics", name)
	return unknownUnless(n, ok && err == nil)
}

func unknownUnless(n int, ok bool) int {
	if !ok {
		return -1
	}
	return n
}

// A totalCounter turns a counter read from a process that the harness may kill and
// restart into a total for the run: a reading lower than the last one is a new process
// counting from zero, so the last reading is banked. What the dead process counted
// between the last reading and its death is lost, so the total is a lower bound, like
// Run.FailedPublishAttempts.
type totalCounter struct {
	banked, last int
	seen         bool
}

// observe takes a reading (-1: none) and returns the total so far, -1 until the first
// reading.
func (c *totalCounter) observe(reading int) int {
	switch {
	case reading < 0 && !c.seen:
		return -1
	case reading < 0:
		return c.banked + c.last
	}
	if c.seen && reading < c.last {
		c.banked += c.last
	}
	c.last, c.seen = reading, true
	return c.banked + c.last
}
