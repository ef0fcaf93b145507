package harness

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// A student's Kafka that wants TLS and SASL (the native broker's SASL_SSL listener): the
// verifier's reader and the topic watch reach it with the security options, and the
// reader reaches nothing without them.
func TestHarnessReadsAKafkaThatWantsTLSAndSASL(t *testing.T) {
	t.Parallel()
	listener := testenv.KafkaSASLSSL(t)
	security := testenv.SecurityOpts(t, listener.Security)
	topic := testenv.NewTopic(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	paymentID, eventID := uuid.New(), uuid.New()
	producer, err := kgo.NewClient(kgo.SeedBrokers(testenv.KafkaBrokers(t)...))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.ProduceSync(ctx, testenv.PaymentRecord(t, topic, paymentID, eventID)).FirstErr(); err != nil {
		t.Fatalf("produce through DIRECT: %v", err)
	}

	contents, err := verify.ReadTopicExcept(ctx, listener.Brokers, topic, nil, security...)
	if err != nil {
		t.Fatalf("ReadTopicExcept over SASL_SSL: %v", err)
	}
	if contents.Records != 1 || contents.EventCopies[eventID.String()] != 1 {
		t.Errorf("read %d records, event copies %v; want the 1 record of event %s", contents.Records, contents.EventCopies, eventID)
	}

	watch, err := faults.StartTopicWatch(ctx, faults.WatchConfig{Brokers: listener.Brokers, KafkaOpts: security, Topic: topic, Origin: time.Now(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("StartTopicWatch over SASL_SSL: %v", err)
	}
	if err := watch.CatchUp(ctx, 30*time.Second); err != nil {
		t.Errorf("topic watch over SASL_SSL: %v", err)
	}
	if _, ok := watch.Stop().EventSeenS[eventID.String()]; !ok {
		t.Errorf("the topic watch over SASL_SSL did not see event %s", eventID)
	}

	plainCtx, plainCancel := context.WithTimeout(ctx, 3*time.Second)
	defer plainCancel()
	if _, err := verify.ReadTopicExcept(plainCtx, listener.Brokers, topic, nil); err == nil {
		t.Errorf("ReadTopicExcept without the security options read the SASL_SSL listener, want an error")
	}
}
