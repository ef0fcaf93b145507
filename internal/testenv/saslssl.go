package testenv

import (
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/envconfig"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
)

// SASLSSL is the native broker's SASL_SSL listener, as a client configured by the
// KAFKA_* variables reaches it.
type SASLSSL struct {
	// Brokers is the listener's address.
	Brokers []string
	// Env holds the variables of docs/contract.md that reach it (KAFKA_BROKERS,
	// KAFKA_TLS_CA_FILE, KAFKA_SASL_*), for a binary's getenv.
	Env map[string]string
	// Security is Env read by kafkasec.Load; change a field to break it on purpose.
	Security kafkasec.Config
}

// KafkaSASLSSL returns the SASL_SSL listener of the test broker (devstack.KafkaSASLSSL),
// and fails the test when there is none.
func KafkaSASLSSL(tb testing.TB) SASLSSL {
	tb.Helper()
	env, err := devstack.KafkaSASLSSL(os.Getenv)
	if err != nil {
		tb.Fatalf("Kafka's SASL_SSL listener for tests: %v", err)
	}
	read := envconfig.New(func(name string) string { return env[name] })
	sec := kafkasec.Load(read)
	if err := read.Err(); err != nil {
		tb.Fatalf("settings of the SASL_SSL listener: %v", err)
	}
	return SASLSSL{Brokers: strings.Split(env["KAFKA_BROKERS"], ","), Env: env, Security: sec}
}

// SecurityOpts returns the franz-go options of sec (kafkasec.Config.ClientOpts), and
// fails the test if the settings are wrong.
func SecurityOpts(tb testing.TB, sec kafkasec.Config) []kgo.Opt {
	tb.Helper()
	opts, err := sec.ClientOpts()
	if err != nil {
		tb.Fatalf("Kafka security options: %v", err)
	}
	return opts
}
