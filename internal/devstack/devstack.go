// Package devstack is the one home of the native development stack that scripts/stack
// runs (PostgreSQL, Kafka, Toxiproxy): its addresses (Ports), the scripts' verbs, and the
// throwaway databases and topics that tests, benchmarks and chaos runs make on it.
//
// It takes no testing.TB: internal/testenv wraps it for tests (failing the test,
// cleaning up when it ends), cmd/bench and internal/chaos call it directly.
package devstack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/repo"
)

// The names of the native Toxiproxy server's proxies (scripts/stack/toxiproxy.sh); their
// ports are in Ports.
const (
	// RelayProxy is the proxy between the relay and Kafka, at Ports.ProxiedBroker.
	RelayProxy = "kafka_relay"
	// PostgresProxy is the proxy in front of PostgreSQL, at Ports.ProxiedPostgres; only
	// the pg-faults chaos scenario sends a service through it.
	PostgresProxy = "postgres_api"
	// ConsumerPostgresProxy is the proxy in front of PostgreSQL at
	// Ports.ConsumerProxiedPostgres; only the consumer-db chaos scenario sends a service
	// through it (the consumer).
	ConsumerPostgresProxy = "postgres_consumer"
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
// directory, with the ports in its environment. A cold Kafka start downloads its jars
// with Maven, hence the timeout.
func startScript(name string, ports Ports) error {
	root, err := repo.Root()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "stack", name), "start")
	cmd.Env = append(os.Environ(), ports.Environ()...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("run scripts/stack/%s start: %w\n%s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// The servers are machine-wide and their start scripts idempotent (they take file
// locks), so one start per script and ports per process is enough: these are
// process-wide on purpose, and the only state of the package.
var (
	startsMu sync.Mutex
	starts   = map[string]func() error{}
)

// startOnce runs startScript(name, ports) once per process.
func startOnce(name string, ports Ports) error {
	key := fmt.Sprint(name, ports)
	startsMu.Lock()
	start, ok := starts[key]
	if !ok {
		start = sync.OnceValue(func() error { return startScript(name, ports) })
		starts[key] = start
	}
	startsMu.Unlock()
	return start()
}

// PostgresURL returns the admin URL of the PostgreSQL server to use: DATABASE_URL when
// getenv has it (a server someone else runs), otherwise the AdminURL of the native
// server on the ports getenv gives (LoadPorts), which it starts on first use in this
// process and leaves running.
func PostgresURL(getenv func(string) string) (string, error) {
	if u := getenv("DATABASE_URL"); u != "" {
		return u, nil
	}
	ports, err := LoadPorts(getenv)
	if err != nil {
		return "", err
	}
	if err := startOnce("postgres.sh", ports); err != nil {
		return "", fmt.Errorf("start PostgreSQL: %w", err)
	}
	return ports.AdminURL(), nil
}

// KafkaBrokers returns the seed brokers to use: the comma-separated KAFKA_BROKERS when
// getenv has it, otherwise the DirectBroker of the native broker on the ports getenv
// gives (LoadPorts), which it starts on first use in this process and leaves running.
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
	ports, err := LoadPorts(getenv)
	if err != nil {
		return nil, err
	}
	if err := startOnce("kafka.sh", ports); err != nil {
		return nil, fmt.Errorf("start Kafka: %w", err)
	}
	return []string{ports.DirectBroker()}, nil
}
