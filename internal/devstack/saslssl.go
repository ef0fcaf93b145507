package devstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/repo"
)

// KafkaSASLSSL returns the settings that reach the native broker's SASL_SSL listener
// (Ports.SASLSSLBroker: TLS with a certificate of the stack's own CA, and a SCRAM user),
// as the variables of docs/contract.md: KAFKA_BROKERS, KAFKA_TLS_CA_FILE,
// KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD_FILE. It starts the
// broker on first use, as KafkaBrokers does, and asks scripts/stack/kafka.sh sasl-env,
// which knows where the broker that runs, this checkout's or another's, keeps its CA.
//
// A broker of one's own (KAFKA_BROKERS set) has no such listener known here: the error
// says so rather than testing the plaintext broker.
func KafkaSASLSSL(getenv func(string) string) (map[string]string, error) {
	if getenv("KAFKA_BROKERS") != "" {
		return nil, errors.New("KAFKA_BROKERS is set: the SASL_SSL tests need the native broker's SASL_SSL listener (scripts/stack/kafka.sh), so unset KAFKA_BROKERS to run them")
	}
	ports, err := LoadPorts(getenv)
	if err != nil {
		return nil, err
	}
	if err := startOnce("kafka.sh", ports); err != nil {
		return nil, fmt.Errorf("start Kafka: %w", err)
	}
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "stack", "kafka.sh"), "sasl-env")
	cmd.Env = append(os.Environ(), ports.Environ()...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("scripts/stack/kafka.sh sasl-env: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseEnv(string(out))
}

// parseEnv reads NAME=value lines.
func parseEnv(text string) (map[string]string, error) {
	env := map[string]string{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("scripts/stack/kafka.sh sasl-env printed %q, want NAME=value lines", line)
		}
		env[name] = value
	}
	return env, nil
}
