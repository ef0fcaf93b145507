// Package kafkasec turns the Kafka security settings of docs/contract.md (KAFKA_TLS_*,
// KAFKA_SASL_*) into franz-go client options: TLS with a CA of the operator's choosing and
// an optional client certificate, and SASL with SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN.
// Both relays, the consumer and the chaos harness build their clients' security from it,
// so that a broker reachable by one is reachable by all.
//
//	sec := kafkasec.Load(envconfig.New(getenv))
//	opts, err := sec.ClientOpts() // checks the settings, reads the files
//	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...))...)
//
// With nothing set, the connection stays plaintext and unauthenticated, as the native
// stack's and the compose file's brokers expect, and ClientOpts returns no option.
package kafkasec

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/dscourse/payments-outbox/internal/envconfig"
)

// The SASL mechanisms Mechanism accepts, spelled as Kafka's sasl.enabled.mechanisms.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	Plain       = "PLAIN"
)

// Config is how a client reaches a broker that wants TLS, SASL, or both. The zero value
// is plaintext without authentication.
type Config struct {
	// TLS (KAFKA_TLS, default false; true as soon as a KAFKA_TLS_* file or server name
	// is set) dials the brokers with TLS 1.2 or later and checks their certificates.
	TLS bool
	// CAFile (KAFKA_TLS_CA_FILE) is a PEM file of the CAs that sign the brokers'
	// certificates; empty, the system's roots are trusted (a managed Kafka with a public
	// certificate).
	CAFile string
	// CertFile and KeyFile (KAFKA_TLS_CERT_FILE, KAFKA_TLS_KEY_FILE), both or neither,
	// are the PEM certificate and key the client shows a broker that authenticates
	// clients by TLS (ssl.client.auth=required).
	CertFile string
	KeyFile  string
	// ServerName (KAFKA_TLS_SERVER_NAME), when set, is the name checked in every
	// broker's certificate instead of the host the client dials: for brokers reached
	// through an address their certificate does not name (a tunnel, a proxy).
	ServerName string

	// Mechanism (KAFKA_SASL_MECHANISM, default empty: no SASL) is SCRAM-SHA-256,
	// SCRAM-SHA-512 or PLAIN. PLAIN sends the password as is, so it needs TLS.
	Mechanism string
	// Username (KAFKA_SASL_USERNAME) is the SASL user; required with a Mechanism.
	Username string
	// Password (KAFKA_SASL_PASSWORD) is the SASL user's password. PasswordFile
	// (KAFKA_SASL_PASSWORD_FILE) names a file holding it instead, as a mounted secret
	// does; one of the two is required with a Mechanism. A trailing newline in the
	// file is not part of the password.
	Password     Secret
	PasswordFile string
}

// Secret is a password. It prints as "[hidden]" with fmt and slog, so that a Config
// can be logged or put in an error whole; string(s) is the value.
type Secret string

// String hides the secret from fmt's %v and %s.
func (Secret) String() string { return "[hidden]" }

// GoString hides the secret from fmt's %#v.
func (Secret) GoString() string { return `"[hidden]"` }

// LogValue hides the secret from slog.
func (Secret) LogValue() slog.Value { return slog.StringValue("[hidden]") }

// MarshalJSON hides the secret from encoding/json, which slog's JSON handler uses for
// a struct holding one.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"[hidden]"`), nil }

// LogValue logs the settings as String describes them.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// Load reads the KAFKA_TLS_* and KAFKA_SASL_* variables. A value that does not parse is
// reported by env.Err; the other mistakes by Validate (or ClientOpts, which calls it).
func Load(env *envconfig.Env) Config {
	c := Config{
		CAFile:       env.String("KAFKA_TLS_CA_FILE", ""),
		CertFile:     env.String("KAFKA_TLS_CERT_FILE", ""),
		KeyFile:      env.String("KAFKA_TLS_KEY_FILE", ""),
		ServerName:   env.String("KAFKA_TLS_SERVER_NAME", ""),
		Mechanism:    strings.ToUpper(env.String("KAFKA_SASL_MECHANISM", "")),
		Username:     env.String("KAFKA_SASL_USERNAME", ""),
		Password:     Secret(env.String("KAFKA_SASL_PASSWORD", "")),
		PasswordFile: env.String("KAFKA_SASL_PASSWORD_FILE", ""),
	}
	c.TLS = env.Bool("KAFKA_TLS", c.tlsSettings() != "")
	return c
}

// tlsSettings names the first KAFKA_TLS_* setting that is set, or returns "".
func (c Config) tlsSettings() string {
	switch {
	case c.CAFile != "":
		return "KAFKA_TLS_CA_FILE"
	case c.CertFile != "":
		return "KAFKA_TLS_CERT_FILE"
	case c.KeyFile != "":
		return "KAFKA_TLS_KEY_FILE"
	case c.ServerName != "":
		return "KAFKA_TLS_SERVER_NAME"
	}
	return ""
}

// Validate checks the settings against each other, without reading any file, and says
// how to fix each mistake. It never quotes the password.
func (c Config) Validate() error {
	var errs []error
	if name := c.tlsSettings(); name != "" && !c.TLS {
		errs = append(errs, fmt.Errorf("KAFKA_TLS=false, yet %s is set: unset KAFKA_TLS (a KAFKA_TLS_* setting turns TLS on) or unset %s", name, name))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("KAFKA_TLS_CERT_FILE and KAFKA_TLS_KEY_FILE go together: set both for a client certificate, or neither"))
	}
	switch c.Mechanism {
	case "":
		if c.Username != "" || c.Password != "" || c.PasswordFile != "" {
			errs = append(errs, fmt.Errorf("KAFKA_SASL_USERNAME or a password is set but KAFKA_SASL_MECHANISM is not: set it to %s, %s or %s, or unset the others", ScramSHA512, ScramSHA256, Plain))
		}
		return errors.Join(errs...)
	case ScramSHA256, ScramSHA512, Plain:
	default:
		errs = append(errs, fmt.Errorf("KAFKA_SASL_MECHANISM=%q: use %s, %s or %s (what the broker's sasl.enabled.mechanisms lists), or unset it for no SASL", c.Mechanism, ScramSHA512, ScramSHA256, Plain))
	}
	if c.Username == "" {
		errs = append(errs, fmt.Errorf("KAFKA_SASL_MECHANISM=%s needs KAFKA_SASL_USERNAME", c.Mechanism))
	}
	switch {
	case c.Password != "" && c.PasswordFile != "":
		errs = append(errs, errors.New("KAFKA_SASL_PASSWORD and KAFKA_SASL_PASSWORD_FILE are both set: keep one"))
	case c.Password == "" && c.PasswordFile == "":
		errs = append(errs, fmt.Errorf("KAFKA_SASL_MECHANISM=%s needs a password: set KAFKA_SASL_PASSWORD_FILE to a file holding it (or KAFKA_SASL_PASSWORD)", c.Mechanism))
	}
	if c.Mechanism == Plain && !c.TLS {
		errs = append(errs, errors.New("KAFKA_SASL_MECHANISM=PLAIN sends the password as is: turn TLS on (KAFKA_TLS_CA_FILE, or KAFKA_TLS=true for a broker with a public certificate), or use SCRAM-SHA-512"))
	}
	return errors.Join(errs...)
}

// String describes the settings for a log line at start, without the password: e.g.
// "TLS (CA /etc/kafka/ca.pem), SASL SCRAM-SHA-512 as payments".
func (c Config) String() string {
	var parts []string
	if c.TLS {
		ca := "system roots"
		if c.CAFile != "" {
			ca = "CA " + c.CAFile
		}
		if c.CertFile != "" {
			ca += ", client certificate " + c.CertFile
		}
		parts = append(parts, "TLS ("+ca+")")
	}
	if c.Mechanism != "" {
		parts = append(parts, "SASL "+c.Mechanism+" as "+c.Username)
	}
	if len(parts) == 0 {
		return "plaintext, no SASL"
	}
	return strings.Join(parts, ", ")
}
