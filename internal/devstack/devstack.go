// Package devstack is the one home of the native development stack that scripts/stack
// runs (PostgreSQL, Kafka, Toxiproxy): its fixed addresses, the scripts' verbs, and the
// throwaway databases and topics that tests, benchmarks and chaos runs make on it.
//
// It takes no testing.TB: internal/testenv wraps it for tests (failing the test,
// cleaning up when it ends), cmd/bench and internal/chaos call it directly.
package devstack

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/repo"
)

// The native stack's fixed addresses (docs/contract.md). They are machine-wide: a stack
// started from one checkout serves every other checkout on the machine.
const (
	// AdminURL is the PostgreSQL admin URL of scripts/stack/postgres.sh. Its role may
	// create databases.
	AdminURL = "postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable"
	// DirectBroker is Kafka's DIRECT listener, never behind a proxy: tests, the
	// consumer, the chaos verifier, every admin request.
	DirectBroker = "127.0.0.1:19092"
	// ProxiedBroker is the Toxiproxy proxy RelayProxy in front of Kafka's PROXIED
	// listener, which advertises this address, so a client seeded here keeps all its
	// traffic behind the proxy.
	ProxiedBroker = "127.0.0.1:29092"
	// ToxiproxyAPI is the native Toxiproxy server's API.
	ToxiproxyAPI = "127.0.0.1:8474"
	// RelayProxy is the name of the Toxiproxy proxy between the relay and Kafka.
	RelayProxy = "kafka_relay"
	// PostgresProxy is the name of the Toxiproxy proxy in front of PostgreSQL, at
	// ProxiedPostgres; only the pg-faults chaos scenario sends a service through it.
	PostgresProxy = "postgres_api"
	// ProxiedPostgres is where PostgresProxy listens; it forwards to PostgreSQL's port
	// of AdminURL.
	ProxiedPostgres = "127.0.0.1:25432"
	// PostgresUpstream is PostgreSQL's address, AdminURL's host and port.
	PostgresUpstream = "127.0.0.1:55432"
)

// RunScript runs "scripts/stack/<name> <verb>" of the repository at root and returns
// what it printed. The error carries that output: it is where the scripts say why.
func RunScript(ctx context.Context, root, name, verb string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "stack", name), verb)
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		return text, fmt.Errorf("run scripts/stack/%s %s: %w\n%s", name, verb, err, text)
	}
	return text, nil
}

// startScript runs "<name> start" from the repository found above the working
// directory. A cold Kafka start downloads its jars with Maven, hence the timeout.
func startScript(name string) error {
	root, err := repo.Root()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err = RunScript(ctx, root, name, "start")
	return err
}

// The servers are machine-wide and their start scripts idempotent (they take file
// locks), so one start per process is enough: these are process-wide on purpose, and
// the only state of the package.
var (
	startPostgresOnce = sync.OnceValue(func() error { return startScript("postgres.sh") })
	startKafkaOnce    = sync.OnceValue(func() error { return startScript("kafka.sh") })
)

// PostgresURL returns the admin URL of the PostgreSQL server to use: DATABASE_URL when
// getenv has it (a server someone else runs), otherwise AdminURL of the native server,
// which it starts on first use in this process and leaves running.
func PostgresURL(getenv func(string) string) (string, error) {
	if u := getenv("DATABASE_URL"); u != "" {
		return u, nil
	}
	if err := startPostgresOnce(); err != nil {
		return "", fmt.Errorf("start PostgreSQL: %w", err)
	}
	return AdminURL, nil
}

// KafkaBrokers returns the seed brokers to use: the comma-separated KAFKA_BROKERS when
// getenv has it, otherwise DirectBroker of the native broker, which it starts on first
// use in this process and leaves running.
func KafkaBrokers(getenv func(string) string) ([]string, error) {
	if env := getenv("KAFKA_BROKERS"); env != "" {
		var brokers []string
		for b := range strings.SplitSeq(env, ",") {
			if b = strings.TrimSpace(b); b != "" {
				brokers = append(brokers, b)
			}
		}
		return brokers, nil
	}
	if err := startKafkaOnce(); err != nil {
		return nil, fmt.Errorf("start Kafka: %w", err)
	}
	return []string{DirectBroker}, nil
}
