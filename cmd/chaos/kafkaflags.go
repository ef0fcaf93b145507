package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/envconfig"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
)

// kafkaFlagVars are the variables of docs/contract.md ("Kafka security") that the
// -kafka-* flags stand for, each flag named after its variable: -kafka-tls-ca-file is
// KAFKA_TLS_CA_FILE. The password has no flag, because a command line is visible to
// every user of the machine: -kafka-sasl-password-file, or KAFKA_SASL_PASSWORD in the
// environment.
var kafkaFlagVars = []string{
	"KAFKA_TLS", "KAFKA_TLS_CA_FILE", "KAFKA_TLS_CERT_FILE", "KAFKA_TLS_KEY_FILE", "KAFKA_TLS_SERVER_NAME",
	"KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD_FILE",
}

// kafkaFlags holds the -kafka-* flags' values by the variable each stands for.
type kafkaFlags map[string]*string

// addKafkaFlags defines the -kafka-* flags on flags.
func addKafkaFlags(flags *flag.FlagSet) kafkaFlags {
	k := kafkaFlags{}
	for _, v := range kafkaFlagVars {
		k[v] = flags.String(kafkaFlagName(v), "", "with -api-url: "+v+" for the harness's own Kafka clients of -brokers (docs/contract.md, Kafka security)")
	}
	return k
}

// kafkaFlagName is the flag of variable v: KAFKA_TLS_CA_FILE is kafka-tls-ca-file.
func kafkaFlagName(v string) string {
	return strings.ReplaceAll(strings.ToLower(v), "_", "-")
}

// targetOpts returns the franz-go options that reach a student's Kafka (-brokers, with
// -api-url) with the -kafka-* flags, read by kafkasec as the binaries read the
// variables, and KAFKA_SASL_PASSWORD from getenv. It asks the brokers once, so that a
// refused password or certificate stops the run before any load, with the broker's
// words. The flags without -api-url are refused: the harness's own stacks are plaintext.
func (k kafkaFlags) targetOpts(ctx context.Context, getenv func(string) string, target bool, brokers []string, logger *slog.Logger) ([]kgo.Opt, error) {
	values := map[string]string{"KAFKA_SASL_PASSWORD": getenv("KAFKA_SASL_PASSWORD")}
	var set []string
	for v, value := range k {
		if *value != "" {
			values[v] = *value
			set = append(set, "-"+kafkaFlagName(v))
		}
	}
	if len(set) == 0 {
		return nil, nil
	}
	if !target {
		return nil, fmt.Errorf("%s: the -kafka-* flags are for a student's Kafka, with -api-url and -brokers; the harness's own stacks are plaintext", strings.Join(set, ", "))
	}
	env := envconfig.New(func(name string) string { return values[name] })
	sec := kafkasec.Load(env)
	opts, err := sec.ClientOpts()
	if err := errors.Join(env.Err(), err); err != nil {
		return nil, fmt.Errorf("the -kafka-* flags (each stands for the variable it is named after): %w", err)
	}
	if err := sec.CheckAtStart(ctx, brokers, opts, logger); err != nil {
		return nil, fmt.Errorf("-brokers %s: %w", strings.Join(brokers, ","), err)
	}
	return opts, nil
}
