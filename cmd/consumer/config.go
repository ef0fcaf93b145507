package main

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/antifraud"
	"github.com/dscourse/payments-outbox/internal/envconfig"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
)

// config is everything cmd/consumer reads from its environment (docs/contract.md lists the
// shared variables). Unset variables take the defaults documented here, which loadConfig
// passes to the reader.
type config struct {
	// DatabaseURL (DATABASE_URL, required) is the antifraud database, e.g.
	// postgres://postgres@127.0.0.1:55432/antifraud?sslmode=disable.
	DatabaseURL string
	// KafkaBrokers (KAFKA_BROKERS, default 127.0.0.1:19092) are the seed brokers,
	// comma-separated. The consumer reads the DIRECT listener, never the chaos proxy.
	KafkaBrokers []string
	// KafkaTopic (KAFKA_TOPIC, default payments.events) carries the payment events.
	KafkaTopic string
	// Kafka is how the consumer reaches the brokers: TLS and SASL from KAFKA_TLS_* and
	// KAFKA_SASL_* (kafkasec.Config documents each); unset, plaintext.
	Kafka kafkasec.Config
	// KafkaClientOpts are Kafka's franz-go options, which loadConfig builds, reading
	// the files Kafka names once, at start.
	KafkaClientOpts []kgo.Opt
	// KafkaGroup (KAFKA_GROUP, default antifraud) is the consumer group.
	KafkaGroup string
	// KafkaSessionTimeout (KAFKA_SESSION_TIMEOUT, default 45s, the broker allows 6s to 30m)
	// is how long the group waits for a member that stopped heartbeating. A killed
	// consumer (the chaos consumer-crash scenario) holds its partitions this long before
	// the group moves them; a clean shutdown leaves at once.
	KafkaSessionTimeout time.Duration
	// KafkaRebalanceProtocol (KAFKA_REBALANCE_PROTOCOL, default cooperative-sticky) is
	// how the group hands partitions over: eager, cooperative-sticky, or consumer
	// (KIP-848, Kafka 4.0+, whose session timeout is the broker's).
	KafkaRebalanceProtocol antifraud.RebalanceProtocol
	// HTTPAddr (HTTP_ADDR, default 127.0.0.1:8081) serves /healthz and /metrics; port 0
	// picks a free port, which run logs.
	HTTPAddr string
	// MaxPollRecords (ANTIFRAUD_MAX_POLL_RECORDS, default antifraud.DefaultMaxPollRecords,
	// 16000) bounds one batch, hence its database transactions.
	MaxPollRecords int
	// Rules are the fraud thresholds:
	//   ANTIFRAUD_REVIEW_AMOUNT   (default 100000 minor units) amount above it: review
	//   ANTIFRAUD_VELOCITY_WINDOW (default 10m) the velocity window, in event time
	//   ANTIFRAUD_VELOCITY_REVIEW (default 5)  more payments than this in the window: review
	//   ANTIFRAUD_VELOCITY_BLOCK  (default 10) more payments than this in the window: block
	//   ANTIFRAUD_TOTAL_REVIEW_AMOUNT (default 1000000000 minor units) a payment taking the
	//                             user's running total in its currency above it: review
	Rules antifraud.Rules
	// DedupRetention (ANTIFRAUD_DEDUP_RETENTION, default 2160h = 90 days, at least 24h) is
	// how long processed_events rows are kept; it must exceed the longest redelivery
	// horizon (docs/adr/0004-consumer-dedup-store.md).
	DedupRetention time.Duration
	// CrashAfterDBCommitProb (ANTIFRAUD_CRASH_AFTER_DB_COMMIT_PROB, default 0 = off) is a
	// FAULT-INJECTION knob for the chaos consumer-crash scenario: the probability, per
	// batch, that the process kills itself between its database commit and its offset
	// commit. Never set it in production.
	CrashAfterDBCommitProb float64
}

// loadConfig reads the environment through getenv, fills in the defaults and validates
// the result. Every mistake is reported at once, each with how to fix it.
func loadConfig(getenv func(string) string) (config, error) {
	env := envconfig.New(getenv)
	cfg := config{
		DatabaseURL:         env.String("DATABASE_URL", ""),
		KafkaBrokers:        env.List("KAFKA_BROKERS", "127.0.0.1:19092"),
		KafkaTopic:          env.String("KAFKA_TOPIC", event.DefaultTopic),
		Kafka:               kafkasec.Load(env),
		KafkaGroup:          env.String("KAFKA_GROUP", "antifraud"),
		KafkaSessionTimeout: env.Duration("KAFKA_SESSION_TIMEOUT", 45*time.Second),
		// Checked by Validate, with the list of names.
		KafkaRebalanceProtocol: antifraud.RebalanceProtocol(env.String("KAFKA_REBALANCE_PROTOCOL", string(antifraud.DefaultRebalanceProtocol))),
		HTTPAddr:               env.String("HTTP_ADDR", "127.0.0.1:8081"),
		MaxPollRecords:         env.Int("ANTIFRAUD_MAX_POLL_RECORDS", antifraud.DefaultMaxPollRecords),
		Rules: antifraud.Rules{
			ReviewAmount:   int64(env.Int("ANTIFRAUD_REVIEW_AMOUNT", 100_000)),
			VelocityWindow: env.Duration("ANTIFRAUD_VELOCITY_WINDOW", 10*time.Minute),
			VelocityReview: env.Int("ANTIFRAUD_VELOCITY_REVIEW", 5),
			VelocityBlock:  env.Int("ANTIFRAUD_VELOCITY_BLOCK", 10),
			// A cumulative amount per user and currency: the rule that reads the running
			// totals (internal/antifraud/rules.go).
			TotalReviewAmount: int64(env.Int("ANTIFRAUD_TOTAL_REVIEW_AMOUNT", 1_000_000_000)),
		},
		DedupRetention:         env.Duration("ANTIFRAUD_DEDUP_RETENTION", 90*24*time.Hour),
		CrashAfterDBCommitProb: env.Float("ANTIFRAUD_CRASH_AFTER_DB_COMMIT_PROB", 0),
	}
	// ClientOpts checks the Kafka security settings and reads their files (the CA, the
	// password file): a missing one stops the start here.
	kafkaOpts, kafkaErr := cfg.Kafka.ClientOpts()
	cfg.KafkaClientOpts = kafkaOpts
	// A value that did not parse reads as its fallback, so Validate still has something
	// to check, and the operator learns of every mistake in one start.
	if err := errors.Join(env.Err(), kafkaErr, cfg.Validate()); err != nil {
		return config{}, err
	}
	return cfg, nil
}

// Validate checks the configuration before anything starts, and says how to fix it.
func (c config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL is required: set it to the antifraud database, e.g. postgres://postgres@127.0.0.1:55432/antifraud?sslmode=disable (make run-consumer does this for the native stack)"))
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("HTTP_ADDR=%q is not host:port: use e.g. 127.0.0.1:8081, or :8081 for every interface", c.HTTPAddr))
	}
	if len(c.KafkaBrokers) == 0 {
		errs = append(errs, errors.New("KAFKA_BROKERS is empty: list the seed brokers, e.g. 127.0.0.1:19092"))
	}
	for _, b := range c.KafkaBrokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			errs = append(errs, fmt.Errorf("KAFKA_BROKERS: %q is not host:port: use e.g. 127.0.0.1:19092", b))
		}
	}
	if c.KafkaSessionTimeout < 6*time.Second || c.KafkaSessionTimeout > 30*time.Minute {
		errs = append(errs, fmt.Errorf("KAFKA_SESSION_TIMEOUT=%s: the broker accepts 6s to 30m by default, e.g. 45s", c.KafkaSessionTimeout))
	}
	if _, err := antifraud.ParseRebalanceProtocol(string(c.KafkaRebalanceProtocol)); err != nil {
		errs = append(errs, fmt.Errorf("KAFKA_REBALANCE_PROTOCOL: %w", err))
	}
	if c.MaxPollRecords < 1 {
		errs = append(errs, fmt.Errorf("ANTIFRAUD_MAX_POLL_RECORDS=%d: want at least 1", c.MaxPollRecords))
	}
	if c.CrashAfterDBCommitProb < 0 || c.CrashAfterDBCommitProb > 1 {
		errs = append(errs, fmt.Errorf("ANTIFRAUD_CRASH_AFTER_DB_COMMIT_PROB=%v: want a probability between 0 and 1", c.CrashAfterDBCommitProb))
	}
	if err := (antifraud.CleanerConfig{Retention: c.DedupRetention}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("ANTIFRAUD_DEDUP_RETENTION: %w", err))
	}
	if err := c.Rules.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("ANTIFRAUD_* rules: %w", err))
	}
	return errors.Join(errs...)
}
