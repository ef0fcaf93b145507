package chaos

import "github.com/twmb/franz-go/pkg/kgo"

// kafkaClient opens a Kafka client seeded at brokers with the security options first
// (TLS, SASL: what cmd/chaos builds from its -kafka-* flags with internal/kafkasec),
// then opts. Our stacks' brokers are plaintext and need no security option; a
// student's Kafka (Target.Brokers) may want TLS and SASL, and every client the harness
// opens on it (the verifier's reader, the topic watch, the sampler) goes through here.
func kafkaClient(brokers []string, security []kgo.Opt, opts ...kgo.Opt) (*kgo.Client, error) {
	all := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, security...)
	return kgo.NewClient(append(all, opts...)...)
}
