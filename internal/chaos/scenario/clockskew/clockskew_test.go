package clockskew

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The scenario rests on the broker's semantics of message.timestamp.after.max.ms: a
// record stamped further ahead than the limit is refused with INVALID_TIMESTAMP, and
// removing the topic's override restores a default that takes the scenario's skew.
func TestTopicTimestampLimitRefusesTheSkew(t *testing.T) {
	t.Parallel()
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.NewTopic(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rn := &harness.Run{Brokers: brokers, Topic: topic}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordRetries(1))
	if err != nil {
		t.Fatalf("new Kafka client: %v", err)
	}
	defer cl.Close()
	skew := (&clockSkew{Skew: 10 * time.Minute}).Skew
	produceSkewed := func() error {
		r := testenv.PaymentRecord(t, "", uuid.New(), uuid.New())
		r.Timestamp = time.Now().Add(skew)
		return cl.ProduceSync(ctx, r).FirstErr()
	}

	// The broker applies a config change a moment after it answers, so each outcome is
	// awaited, within the test's deadline.
	eventually := func(want func(error) bool) error {
		for {
			err := produceSkewed()
			if want(err) || backoff.Until(ctx, time.Now().Add(100*time.Millisecond)) != nil {
				return err
			}
		}
	}
	limit := strconv.FormatInt((skew / 2).Milliseconds(), 10)
	if err := rn.SetTopicConfig(ctx, timestampLimitConfig, limit); err != nil {
		t.Fatalf("lower the limit: %v", err)
	}
	refused := func(err error) bool { return errors.Is(err, kerr.InvalidTimestamp) }
	if err := eventually(refused); !refused(err) {
		t.Errorf("a record %s ahead under a limit of %s ms: got %v, want INVALID_TIMESTAMP", skew, limit, err)
	}
	if err := rn.SetTopicConfig(ctx, timestampLimitConfig, ""); err != nil {
		t.Fatalf("remove the override: %v", err)
	}
	if err := eventually(func(err error) bool { return err == nil }); err != nil {
		t.Errorf("a record %s ahead under the broker's default: got %v, want it accepted", skew, err)
	}
}
