package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// parseKafkaFlags defines the -kafka-* flags on a flag set of their own and parses args.
func parseKafkaFlags(t *testing.T, args ...string) kafkaFlags {
	t.Helper()
	flags := flag.NewFlagSet("chaos", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	k := addKafkaFlags(flags)
	if err := flags.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return k
}

// The -kafka-* flags: none is plaintext; without -api-url, or with settings that do not
// go together, they are refused with the flag and the variable named.
func TestKafkaFlagsRefuseMistakes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		target  bool
		wantErr []string // parts of the error; none for success
	}{
		{name: "none", args: nil, target: true},
		{name: "none, our stack", args: nil, target: false},
		{name: "without -api-url", args: []string{"-kafka-tls-ca-file", "/ca.pem"}, target: false, wantErr: []string{"-kafka-tls-ca-file", "-api-url"}},
		{name: "unknown mechanism", args: []string{"-kafka-sasl-mechanism", "GSSAPI", "-kafka-sasl-username", "u", "-kafka-sasl-password-file", "/pw"}, target: true,
			wantErr: []string{"the -kafka-* flags", `KAFKA_SASL_MECHANISM="GSSAPI"`}},
		{name: "no password", args: []string{"-kafka-sasl-mechanism", "SCRAM-SHA-512", "-kafka-sasl-username", "u"}, target: true, wantErr: []string{"needs a password"}},
		{name: "missing CA file", args: []string{"-kafka-tls-ca-file", "/nonexistent/ca.pem"}, target: true, wantErr: []string{"KAFKA_TLS_CA_FILE", "no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts, err := parseKafkaFlags(t, tt.args...).targetOpts(context.Background(), func(string) string { return "" }, tt.target, []string{"127.0.0.1:1"}, slog.New(slog.DiscardHandler))
			if len(tt.wantErr) == 0 {
				if err != nil || opts != nil {
					t.Fatalf("targetOpts = %d options, %v; want none, nil", len(opts), err)
				}
				return
			}
			if err == nil {
				t.Fatalf("targetOpts = nil error, want one containing %q", tt.wantErr)
			}
			for _, part := range tt.wantErr {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("targetOpts: %q, want it to contain %q", err, part)
				}
			}
		})
	}
}

// Against the native broker's SASL_SSL listener: the flags reach it, with the password
// from KAFKA_SASL_PASSWORD too, and a wrong password stops the run with the broker's words.
func TestKafkaFlagsReachASASLSSLBroker(t *testing.T) {
	t.Parallel()
	listener := testenv.KafkaSASLSSL(t)
	args := []string{
		"-kafka-tls-ca-file", listener.Env["KAFKA_TLS_CA_FILE"],
		"-kafka-sasl-mechanism", listener.Env["KAFKA_SASL_MECHANISM"],
		"-kafka-sasl-username", listener.Env["KAFKA_SASL_USERNAME"],
	}
	logger := slog.New(slog.DiscardHandler)
	withFile := append(args, "-kafka-sasl-password-file", listener.Env["KAFKA_SASL_PASSWORD_FILE"])
	opts, err := parseKafkaFlags(t, withFile...).targetOpts(t.Context(), func(string) string { return "" }, true, listener.Brokers, logger)
	if err != nil || len(opts) != 2 {
		t.Fatalf("targetOpts with the password file = %d options, %v; want 2 (TLS, SASL), nil", len(opts), err)
	}
	wrong := func(name string) string { return map[string]string{"KAFKA_SASL_PASSWORD": "not-the-password"}[name] }
	_, err = parseKafkaFlags(t, args...).targetOpts(t.Context(), wrong, true, listener.Brokers, logger)
	if err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
		t.Fatalf("targetOpts with a wrong KAFKA_SASL_PASSWORD = %v, want an error saying SASL_AUTHENTICATION_FAILED", err)
	}
	if strings.Contains(err.Error(), "not-the-password") {
		t.Errorf("the error prints the password: %v", err)
	}
}
