package main

import (
	"context"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// A CA that did not sign the broker's certificate stops the API at start, with TLS's
// words, before it opens its database: the relay would otherwise only ever time out.
func TestRunStopsOnAnUntrustedKafkaCertificate(t *testing.T) {
	t.Parallel()
	listener := testenv.KafkaSASLSSL(t)
	env := maps.Clone(listener.Env)
	env["KAFKA_TLS_CA_FILE"] = filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(env["KAFKA_TLS_CA_FILE"], testenv.UnknownCAPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:1/payments?sslmode=disable&connect_timeout=1"
	err := run(context.Background(), []string{"api"}, func(k string) string { return env[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") {
		t.Fatalf("run with a KAFKA_TLS_CA_FILE that did not sign the broker = %v, want an error saying x509: certificate signed by unknown authority", err)
	}
}
