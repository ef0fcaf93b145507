package kafkasec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// ClientOpts validates the settings, reads the files they name, and returns the franz-go
// options that apply them: kgo.DialTLSConfig for TLS, kgo.SASL for SASL, nothing for
// plaintext. Call it at start, so that a missing file or a CA that does not parse stops
// the process there, with the variable to fix; the options hold what the files held.
//
// The options go with any other but kgo.Dialer, which franz-go refuses beside
// DialTLSConfig.
func (c Config) ClientOpts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	var errs []error
	if c.TLS {
		cfg, err := c.tlsConfig()
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, kgo.DialTLSConfig(cfg))
		}
	}
	if c.Mechanism != "" {
		m, err := c.saslMechanism()
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, kgo.SASL(m))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return opts, nil
}

// tlsConfig builds the TLS configuration. An empty ServerName is left for franz-go to
// fill with the host of each broker it dials.
func (c Config) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	var errs []error
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("KAFKA_TLS_CA_FILE: %w", err))
		} else {
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("KAFKA_TLS_CA_FILE=%q holds no PEM certificate: give the CA's certificate, the text between -----BEGIN CERTIFICATE----- and -----END CERTIFICATE-----", c.CAFile))
			}
		}
	}
	if c.CertFile != "" {
		// LoadX509KeyPair's errors name neither the key nor its bytes.
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("KAFKA_TLS_CERT_FILE and KAFKA_TLS_KEY_FILE: %w", err))
		} else {
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// saslMechanism returns the mechanism with the user's credentials.
func (c Config) saslMechanism() (sasl.Mechanism, error) {
	password := string(c.Password)
	if c.PasswordFile != "" {
		data, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			// The path error names the file, not what it holds.
			return nil, fmt.Errorf("KAFKA_SASL_PASSWORD_FILE: %w", err)
		}
		password = strings.TrimRight(string(data), "\r\n")
		if password == "" {
			return nil, fmt.Errorf("KAFKA_SASL_PASSWORD_FILE=%q is empty: write the password into it", c.PasswordFile)
		}
	}
	switch c.Mechanism {
	case ScramSHA256:
		return scram.Auth{User: c.Username, Pass: password}.AsSha256Mechanism(), nil
	case ScramSHA512:
		return scram.Auth{User: c.Username, Pass: password}.AsSha512Mechanism(), nil
	default: // Plain: Validate allows nothing else.
		return plain.Auth{User: c.Username, Pass: password}.AsMechanism(), nil
	}
}

// NewClient opens a Kafka client seeded at brokers with the security options first (what
// ClientOpts returns; none for a plaintext broker), then opts. The chaos harness opens
// every client it points at a student's Kafka through here.
func NewClient(brokers []string, security []kgo.Opt, opts ...kgo.Opt) (*kgo.Client, error) {
	all := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, security...)
	return kgo.NewClient(append(all, opts...)...)
}

// WithAdmin runs f with an admin client made by NewClient, closed when f returns.
func WithAdmin(brokers []string, security []kgo.Opt, f func(*kadm.Client) error) error {
	cl, err := NewClient(brokers, security)
	if err != nil {
		return fmt.Errorf("new Kafka admin client: %w", err)
	}
	defer cl.Close()
	return f(kadm.NewClient(cl))
}
