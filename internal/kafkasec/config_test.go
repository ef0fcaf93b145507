package kafkasec_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/envconfig"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

const testPassword = "s3cret-Pa55word"

func load(env map[string]string) (kafkasec.Config, error) {
	e := envconfig.New(func(name string) string { return env[name] })
	c := kafkasec.Load(e)
	if err := e.Err(); err != nil {
		return kafkasec.Config{}, err
	}
	return c, nil
}

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want kafkasec.Config
	}{
		{name: "nothing set: plaintext", env: nil, want: kafkasec.Config{}},
		{name: "a CA file turns TLS on", env: map[string]string{"KAFKA_TLS_CA_FILE": "/ca.pem"}, want: kafkasec.Config{TLS: true, CAFile: "/ca.pem"}},
		{name: "a server name turns TLS on", env: map[string]string{"KAFKA_TLS_SERVER_NAME": "kafka.internal"}, want: kafkasec.Config{TLS: true, ServerName: "kafka.internal"}},
		{name: "KAFKA_TLS alone: system roots", env: map[string]string{"KAFKA_TLS": "true"}, want: kafkasec.Config{TLS: true}},
		{
			name: "SCRAM with a password file, mechanism in lower case",
			env: map[string]string{
				"KAFKA_TLS_CA_FILE": "/ca.pem", "KAFKA_TLS_CERT_FILE": "/c.pem", "KAFKA_TLS_KEY_FILE": "/k.pem",
				"KAFKA_SASL_MECHANISM": "scram-sha-512", "KAFKA_SASL_USERNAME": "payments", "KAFKA_SASL_PASSWORD_FILE": "/pw",
			},
			want: kafkasec.Config{TLS: true, CAFile: "/ca.pem", CertFile: "/c.pem", KeyFile: "/k.pem", Mechanism: kafkasec.ScramSHA512, Username: "payments", PasswordFile: "/pw"},
		},
		{
			name: "password from the environment",
			env:  map[string]string{"KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": testPassword},
			want: kafkasec.Config{Mechanism: kafkasec.ScramSHA256, Username: "u", Password: testPassword},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := load(tt.env)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Load mismatch (-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate: %v, want nil", err)
			}
		})
	}
}

func TestLoadReportsABadBoolean(t *testing.T) {
	t.Parallel()
	_, err := load(map[string]string{"KAFKA_TLS": "yes please"})
	if err == nil || !strings.Contains(err.Error(), "KAFKA_TLS") {
		t.Fatalf("Load: err %v, want one naming KAFKA_TLS", err)
	}
}

// TestValidate: each mistake is reported with the variable to fix, and the password
// never appears in the message.
func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		c    kafkasec.Config
		want []string // parts of the error
	}{
		{name: "TLS off with a CA file", c: kafkasec.Config{CAFile: "/ca.pem"}, want: []string{"KAFKA_TLS=false", "KAFKA_TLS_CA_FILE"}},
		{name: "a certificate without its key", c: kafkasec.Config{TLS: true, CertFile: "/c.pem"}, want: []string{"KAFKA_TLS_CERT_FILE and KAFKA_TLS_KEY_FILE go together"}},
		{name: "a key without its certificate", c: kafkasec.Config{TLS: true, KeyFile: "/k.pem"}, want: []string{"KAFKA_TLS_CERT_FILE and KAFKA_TLS_KEY_FILE go together"}},
		{name: "an unknown mechanism", c: kafkasec.Config{Mechanism: "GSSAPI", Username: "u", Password: testPassword}, want: []string{`KAFKA_SASL_MECHANISM="GSSAPI"`, "SCRAM-SHA-512"}},
		{name: "credentials without a mechanism", c: kafkasec.Config{Username: "u", Password: testPassword}, want: []string{"KAFKA_SASL_MECHANISM is not"}},
		{name: "no username", c: kafkasec.Config{Mechanism: kafkasec.ScramSHA256, Password: testPassword}, want: []string{"needs KAFKA_SASL_USERNAME"}},
		{name: "no password", c: kafkasec.Config{Mechanism: kafkasec.ScramSHA256, Username: "u"}, want: []string{"needs a password", "KAFKA_SASL_PASSWORD_FILE"}},
		{name: "two passwords", c: kafkasec.Config{Mechanism: kafkasec.ScramSHA256, Username: "u", Password: testPassword, PasswordFile: "/pw"}, want: []string{"both set"}},
		{name: "PLAIN without TLS", c: kafkasec.Config{Mechanism: kafkasec.Plain, Username: "u", Password: testPassword}, want: []string{"PLAIN sends the password as is"}},
		{name: "every mistake at once", c: kafkasec.Config{CertFile: "/c.pem", Mechanism: "x"}, want: []string{"KAFKA_TLS=false", "go together", `KAFKA_SASL_MECHANISM="x"`, "needs KAFKA_SASL_USERNAME", "needs a password"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.c.Validate()
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want an error", tt.c)
			}
			for _, part := range tt.want {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("Validate: %q, want it to contain %q", err, part)
				}
			}
			if strings.Contains(err.Error(), testPassword) {
				t.Errorf("Validate: %q prints the password", err)
			}
			if _, optsErr := tt.c.ClientOpts(); optsErr == nil {
				t.Errorf("ClientOpts = nil error, want Validate's")
			}
		})
	}
}

// TestPasswordNeverPrinted: a Config printed whole, by fmt or slog, or described for
// the start-up log, hides the password.
func TestPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	c := kafkasec.Config{TLS: true, CAFile: "/ca.pem", Mechanism: kafkasec.ScramSHA512, Username: "payments", Password: testPassword}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("kafka", slog.Any("config", c), slog.Any("password", c.Password),
		slog.Any("in a struct", struct{ Kafka kafkasec.Config }{c}))
	outputs := map[string]string{
		"%v": fmt.Sprintf("%v", c), "%+v": fmt.Sprintf("%+v", c), "%#v": fmt.Sprintf("%#v", c),
		"%s password": fmt.Sprintf("%s", c.Password), "String": c.String(), "slog": logged.String(),
	}
	for how, out := range outputs {
		if strings.Contains(out, testPassword) {
			t.Errorf("%s prints the password: %s", how, out)
		}
	}
	if want := "TLS (CA /ca.pem), SASL SCRAM-SHA-512 as payments"; c.String() != want {
		t.Errorf("String() = %q, want %q", c.String(), want)
	}
	if got := (kafkasec.Config{}).String(); got != "plaintext, no SASL" {
		t.Errorf("Config{}.String() = %q, want plaintext, no SASL", got)
	}
}

// TestClientOptsReadsTheFiles: the files are read at start, and each one missing or
// unusable is reported with its variable.
func TestClientOptsReadsTheFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caFile := writeFile(t, dir, "ca.pem", string(testenv.UnknownCAPEM(t)))
	notPEM := writeFile(t, dir, "not.pem", "this is not a certificate\n")
	pwFile := writeFile(t, dir, "password", testPassword+"\n")
	emptyPW := writeFile(t, dir, "empty", "\n")
	missing := filepath.Join(dir, "missing")
	scram := kafkasec.Config{Mechanism: kafkasec.ScramSHA512, Username: "u", PasswordFile: pwFile}

	tests := []struct {
		name     string
		c        kafkasec.Config
		wantOpts int
		wantErr  []string // parts of the error; none for success
	}{
		{name: "plaintext", c: kafkasec.Config{}, wantOpts: 0},
		{name: "TLS with a CA", c: kafkasec.Config{TLS: true, CAFile: caFile}, wantOpts: 1},
		{name: "TLS with the system roots", c: kafkasec.Config{TLS: true}, wantOpts: 1},
		{name: "SCRAM from a password file", c: scram, wantOpts: 1},
		{name: "TLS and PLAIN", c: kafkasec.Config{TLS: true, CAFile: caFile, Mechanism: kafkasec.Plain, Username: "u", Password: testPassword}, wantOpts: 2},
		{name: "a missing CA file", c: kafkasec.Config{TLS: true, CAFile: missing}, wantErr: []string{"KAFKA_TLS_CA_FILE", "no such file"}},
		{name: "a CA file without a certificate", c: kafkasec.Config{TLS: true, CAFile: notPEM}, wantErr: []string{"KAFKA_TLS_CA_FILE", "holds no PEM certificate"}},
		{name: "a client key that does not parse", c: kafkasec.Config{TLS: true, CertFile: caFile, KeyFile: notPEM}, wantErr: []string{"KAFKA_TLS_CERT_FILE and KAFKA_TLS_KEY_FILE"}},
		{name: "a missing password file", c: kafkasec.Config{Mechanism: kafkasec.ScramSHA256, Username: "u", PasswordFile: missing}, wantErr: []string{"KAFKA_SASL_PASSWORD_FILE", "no such file"}},
		{name: "an empty password file", c: kafkasec.Config{Mechanism: kafkasec.ScramSHA256, Username: "u", PasswordFile: emptyPW}, wantErr: []string{"KAFKA_SASL_PASSWORD_FILE", "is empty"}},
		{name: "both files wrong", c: kafkasec.Config{TLS: true, CAFile: notPEM, Mechanism: kafkasec.ScramSHA256, Username: "u", PasswordFile: missing}, wantErr: []string{"KAFKA_TLS_CA_FILE", "KAFKA_SASL_PASSWORD_FILE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts, err := tt.c.ClientOpts()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("ClientOpts: %v", err)
				}
				if len(opts) != tt.wantOpts {
					t.Errorf("ClientOpts gave %d options, want %d", len(opts), tt.wantOpts)
				}
				return
			}
			if err == nil {
				t.Fatalf("ClientOpts = nil error, want one containing %q", tt.wantErr)
			}
			for _, part := range tt.wantErr {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("ClientOpts: %q, want it to contain %q", err, part)
				}
			}
		})
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
