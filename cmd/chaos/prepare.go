package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/repo"
)

// topicPartitions is the partition count docs/contract.md gives the topic of payment
// events, the one every chaos run creates.
const topicPartitions = 3

// prepare is `chaos prepare`: the empty databases and the fresh topic that a run
// against somebody else's service needs (docs/contract.md, "Preparing a run"). It
// prints them as shell assignments, so that a script can eval its output; with -drop
// NAME it removes what an earlier prepare made under that name instead.
func prepare(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	flags := flag.NewFlagSet("chaos prepare", flag.ContinueOnError)
	drop := flags.String("drop", "", "remove the databases and topic that `chaos prepare` printed as NAME, instead of making new ones")
	if err := flags.Parse(args); err != nil {
		return err
	}
	root, err := repo.Root()
	if err != nil {
		return err
	}
	ports, err := devstack.LoadPorts(getenv)
	if err != nil {
		return err
	}
	// The servers are left running: the service to check needs them next.
	native := &stack.Native{Root: root, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if err := native.Start(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(ports.DirectBroker()))
	if err != nil {
		return fmt.Errorf("new Kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	if *drop != "" {
		for _, db := range []string{*drop + "_payments", *drop + "_antifraud"} {
			if err := devstack.DropDatabase(ctx, ports.AdminURL(), db); err != nil {
				return err
			}
		}
		return devstack.DeleteTopic(ctx, adm, *drop)
	}

	name := devstack.UniqueName("student_")
	paymentsURL, err := devstack.CreateDatabase(ctx, ports.AdminURL(), name+"_payments")
	if err != nil {
		return err
	}
	consumerURL, err := devstack.CreateDatabase(ctx, ports.AdminURL(), name+"_antifraud")
	if err != nil {
		return err
	}
	if err := devstack.CreateTopic(ctx, adm, name, topicPartitions); err != nil {
		return err
	}
	fmt.Fprintf(stdout, `# Empty databases and a fresh topic (docs/contract.md, "Preparing a run").
# Apply your migrations to both databases, then start your API with its relay seeded at
# RELAY_BROKERS and your consumer at CONSUMER_BROKERS, both on TOPIC, and run
#   go run ./cmd/chaos -scenario default -api-url http://127.0.0.1:<port> \
#     -payments-db "$PAYMENTS_DB" -consumer-db "$CONSUMER_DB" -topic "$TOPIC"
# Remove them afterwards with: go run ./cmd/chaos prepare -drop %[1]s
NAME='%[1]s'
PAYMENTS_DB='%[2]s'
CONSUMER_DB='%[3]s'
TOPIC='%[1]s'
RELAY_BROKERS='%[4]s'
CONSUMER_BROKERS='%[5]s'
`, name, paymentsURL, consumerURL, ports.ProxiedBroker(), ports.DirectBroker())
	return nil
}
