// Package dualwrite is a TEACHING ANTI-PATTERN. NEVER USE IT. It exists so that
// `make chaos SCENARIO=dual-write` can show, with numbers, what the transactional outbox
// protects against.
//
// The handler does what the course's "before" slide does: it commits the payment in one
// transaction, and then, outside that transaction, publishes the PaymentCreated event
// to Kafka itself. Two writes to two systems with no atomicity between them:
//
//   - the commit succeeds and the publish fails (broker down, timeout, process killed
//     between the two): the payment exists, its event never will. The handler logs
//     the error and answers 201 anyway, so nobody retries. That is a LOST event.
//   - the publish times out although the broker wrote the record (the acknowledgement
//     was lost): the log says "failed" while the event is in the topic. The log is not
//     even a reliable list of what was lost.
//   - swapping the order (publish, then commit) trades lost events for PHANTOM ones:
//     an event about a payment whose commit then failed.
//
// It is the only path to Kafka in this repository outside outbox row, commit, relay,
// and it is off unless cmd/api runs with DUAL_WRITE=true. For the right way, see
// package payment (the payment and its outbox row in one transaction) and package
// outbox (the relay).
package dualwrite

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/payment"
)

// Config configures the teaching handler.
type Config struct {
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Topic receives the PaymentCreated events. Required.
	Topic string
	// PublishTimeout bounds the publish inside the request: the handler will not keep
	// a client waiting on Kafka for long, which is exactly why it loses events.
	// Default 2s.
	PublishTimeout time.Duration
	// ClientOpts are extra franz-go options (tests route traffic through a proxy).
	ClientOpts []kgo.Opt
}

func (c Config) withDefaults() Config {
	c.PublishTimeout = cmp.Or(c.PublishTimeout, 2*time.Second)
	return c
}

// Validate says what is missing.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("dual write: no Kafka brokers: set KAFKA_BROKERS")
	}
	if c.Topic == "" {
		return errors.New("dual write: no Kafka topic: set KAFKA_TOPIC")
	}
	return nil
}

// Handler serves POST /payments the wrong way. Close it at shutdown to close its
// Kafka client.
type Handler struct {
	cfg    Config
	pool   *pgxpool.Pool
	kafka  *kgo.Client
	logger *slog.Logger
}

// NewHandler builds the teaching handler and its Kafka client.
func NewHandler(cfg Config, pool *pgxpool.Pool, logger *slog.Logger) (*Handler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		// franz-go produces idempotently by default, and an idempotent producer refuses
		// to fail a record once its request was sent and before the broker answered: it
		// cannot tell "never received" from "written, reply lost". Neither the context
		// nor RecordDeliveryTimeout could then end ProduceSync, and a silent broker would
		// hold the HTTP request far past PublishTimeout. This option lets both fail such
		// a record, at the price of a possible duplicate if it is produced again, which
		// this handler never does. See the docs of Client.Produce and of this option:
		// https://pkg.go.dev/github.com/twmb/franz-go/pkg/kgo#AllowIdempotentProduceCancellation
		kgo.AllowIdempotentProduceCancellation(),
		kgo.RecordDeliveryTimeout(cfg.PublishTimeout),
	}, cfg.ClientOpts...)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("dual write: new Kafka client: %w", err)
	}
	logger = logger.With(slog.String("component", "dualwrite"))
	logger.Warn("DUAL_WRITE=true: POST /payments uses the dual-write anti-pattern and WILL lose events when Kafka fails; TEACHING ONLY, never run it in production")
	return &Handler{cfg: cfg, pool: pool, kafka: client, logger: logger}, nil
}

// Close closes the Kafka client.
func (h *Handler) Close() { h.kafka.Close() }

// ServeHTTP validates like the real handler, commits the payment alone, then publishes
// the event and ignores the outcome. The Idempotency-Key header is ignored: this mode
// demonstrates the Kafka half of the problem only.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := payment.DecodeCreateRequest(w, r)
	if err != nil {
		payment.WriteError(w, r, h.logger, err)
		return
	}
	p, err := h.insertPayment(r.Context(), req)
	if err != nil {
		payment.WriteError(w, r, h.logger, err)
		return
	}

	// WRITE NUMBER TWO, outside the transaction. Whatever happens here, the payment
	// above is committed and stays committed.
	if err := h.publish(r.Context(), p); err != nil {
		// The anti-pattern in one line: log, move on, answer 201. The event is lost
		// (or, if only the ack was lost, published while we say it failed).
		h.logger.Error("dual write: publish failed, event lost", slog.String("payment_id", p.ID.String()), slog.Any("err", err))
	}
	payment.Encode(w, r, h.logger, http.StatusCreated, map[string]any{
		"id": p.ID, "user_id": p.UserID, "amount": p.Amount, "currency": p.Currency, "created_at": p.CreatedAt,
	})
}

// insertPayment is WRITE NUMBER ONE: the payment row, and no outbox row.
func (h *Handler) insertPayment(ctx context.Context, req payment.CreateRequest) (payment.Payment, error) {
	p, err := payment.NewPayment(req, time.Now())
	if err != nil {
		return payment.Payment{}, err
	}
	_, err = h.pool.Exec(ctx, `
		INSERT INTO payments (id, user_id, amount, currency, created_at)
		VALUES ($1, $2, $3, $4, $5)`,
		p.ID, p.UserID, p.Amount, p.Currency, p.CreatedAt)
	if err != nil {
		return payment.Payment{}, fmt.Errorf("insert payment: %w", err)
	}
	return p, nil
}

// publish produces the event in the same envelope the relay uses (key, headers, record
// timestamp), so the consumer cannot tell the difference: only the guarantees differ.
func (h *Handler) publish(ctx context.Context, p payment.Payment) error {
	payload, err := json.Marshal(payment.NewPaymentCreated(p))
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	// A fresh id per publish: without an outbox row there is nothing that would keep
	// it stable across attempts.
	envelope := event.Envelope{ID: uuid.New(), Type: event.TypePaymentCreated, Key: p.ID.String(), OccurredAt: p.CreatedAt, Payload: payload}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.PublishTimeout)
	defer cancel()
	if err := h.kafka.ProduceSync(ctx, envelope.Record(h.cfg.Topic, time.Now())).FirstErr(); err != nil {
		return fmt.Errorf("publish event of payment %s: %w", p.ID, err)
	}
	return nil
}
