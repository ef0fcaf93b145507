package devstack

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseEnv(t *testing.T) {
	t.Parallel()
	got, err := parseEnv("KAFKA_BROKERS=127.0.0.1:1\n\nKAFKA_TLS_CA_FILE=/a=b/ca.pem\n")
	if err != nil {
		t.Fatalf("parseEnv: %v", err)
	}
	want := map[string]string{"KAFKA_BROKERS": "127.0.0.1:1", "KAFKA_TLS_CA_FILE": "/a=b/ca.pem"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseEnv mismatch (-want +got):\n%s", diff)
	}
	if _, err := parseEnv("Kafka is not running\n"); err == nil || !strings.Contains(err.Error(), "NAME=value") {
		t.Errorf("parseEnv of a sentence: err %v, want one asking for NAME=value lines", err)
	}
}

// KAFKA_BROKERS names a broker whose SASL_SSL listener is unknown here: the error says
// so instead of handing a test the plaintext broker.
func TestKafkaSASLSSLRefusesAnOwnBroker(t *testing.T) {
	t.Parallel()
	_, err := KafkaSASLSSL(func(name string) string { return map[string]string{"KAFKA_BROKERS": "kafka:9092"}[name] })
	if err == nil || !strings.Contains(err.Error(), "unset KAFKA_BROKERS") {
		t.Errorf("KafkaSASLSSL with KAFKA_BROKERS set: err %v, want one saying to unset it", err)
	}
}
