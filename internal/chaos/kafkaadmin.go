package chaos

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// withAdmin runs f with a Kafka admin client seeded at brokers, closed when f returns.
func withAdmin(brokers []string, f func(*kadm.Client) error) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("new Kafka admin client: %w", err)
	}
	defer cl.Close()
	return f(kadm.NewClient(cl))
}
