package rebalance

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// The zombie's freeze under KIP-848 is the broker's session plus a margin, so the
// session must be read from the brokers themselves: the stack's server.properties sets
// group.consumer.session.timeout.ms to 6 s, which a describe of the cluster's dynamic
// defaults does not show (it would answer Kafka's default, 45 s).
func TestBrokerSessionTimeoutIsTheBrokersSetting(t *testing.T) {
	client, err := kgo.NewClient(kgo.SeedBrokers(testenv.KafkaBrokers(t)...))
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	defer client.Close()
	if got := brokerSessionTimeout(t.Context(), kadm.NewClient(client)); got != 6*time.Second {
		t.Errorf("brokerSessionTimeout = %v, want 6s (scripts/stack/kafka/server.properties.tmpl)", got)
	}
}
