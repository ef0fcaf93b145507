package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// probeTimeout bounds CheckAtStart's one request.
const probeTimeout = 10 * time.Second

// CheckAtStart asks the brokers for their API versions once, with opts (ClientOpts's,
// plus any other), when c is not plaintext. It exists because a client with a wrong
// password or an untrusted certificate does not say so where it is used: a produce or a
// fetch keeps retrying until its deadline and fails with "context deadline exceeded".
//
// A mistake in the settings (Misconfigured) is returned, to stop the process at start
// with the broker's or TLS's own words. A broker that does not answer is logged at Warn
// and not returned: the API must start and take payments while Kafka is down, which is
// what the outbox is for, and the relay publishes once the broker is back.
func (c Config) CheckAtStart(ctx context.Context, brokers []string, opts []kgo.Opt, logger *slog.Logger) error {
	if !c.TLS && c.Mechanism == "" {
		return nil
	}
	err := probe(ctx, brokers, opts)
	switch {
	case err == nil:
		logger.Info("Kafka accepts the security settings", slog.String("kafka_security", c.String()))
		return nil
	case Misconfigured(err):
		return fmt.Errorf("Kafka refuses the security settings (%s): %w", c, err)
	default:
		logger.Warn("Kafka did not answer at start; its security settings are untried until it does",
			slog.String("kafka_security", c.String()), slog.Any("err", err))
		return nil
	}
}

// probe sends one ApiVersions request to the seed brokers, through a client of its own.
func probe(ctx context.Context, brokers []string, opts []kgo.Opt) error {
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(brokers...))...)
	if err != nil {
		return fmt.Errorf("new Kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("reach Kafka at %s: %w", strings.Join(brokers, ","), err)
	}
	return nil
}

// Misconfigured reports whether err comes from settings no retry can fix: the broker
// refused the SASL user or mechanism, or its certificate did not verify (an unknown CA,
// a name it does not carry), or the broker hung up at the first request, which franz-go
// reports as kgo.ErrFirstReadEOF and does not retry either: TLS to a plaintext listener,
// or no SASL where the listener wants it.
func Misconfigured(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		header    tls.RecordHeaderError
		firstRead *kgo.ErrFirstReadEOF
	)
	return errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.IllegalSaslState) ||
		errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &hostname) ||
		errors.As(err, &header) || errors.As(err, &firstRead)
}
