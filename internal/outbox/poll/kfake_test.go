package poll

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// useKfake points the bundle's relay at an in-process Kafka (franz-go's kfake), one
// broker whose topic has 3 partitions, closed when the test ends. Tests use it where
// they need a broker error the real broker gives only on a misconfigured host (an
// injected kfake.Fault), or a limit set per test (opts).
func (b *testBundle) useKfake(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(3, b.topic)}, opts...)...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	b.brokers = c.ListenAddrs()
	b.cfg.Brokers = b.brokers
	return c
}
