package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

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

// UnknownCAPEM returns a CA certificate in PEM made for the test, which signed nothing:
// a KAFKA_TLS_CA_FILE that must not verify any broker.
func UnknownCAPEM(tb testing.TB) []byte {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "a CA that signed nothing"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
