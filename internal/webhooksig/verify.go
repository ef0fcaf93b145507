package webhooksig

import (
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Tolerance is how far a call's webhook-timestamp may be from the receiver's clock,
// either way, as the specification recommends: an attacker who recorded a call can
// replay it for this long at most (a receiver that also remembers the webhook-id of
// the calls it accepted for as long closes that window too).
const Tolerance = 5 * time.Minute

// The reasons Verify refuses a call, for errors.Is. The error it returns says more.
var (
	// ErrMissingHeader: a call without webhook-id, webhook-timestamp or
	// webhook-signature is unsigned.
	ErrMissingHeader = errors.New("missing Standard Webhooks header")
	// ErrTimestamp: the timestamp is not unix seconds, or is further than the
	// tolerance from now (a replay, or a sender's clock far off).
	ErrTimestamp = errors.New("webhook timestamp out of tolerance")
	// ErrNoSignature: no v1 signature in the header matches: the body, the id or
	// the timestamp changed, or the call was signed with another secret.
	ErrNoSignature = errors.New("no matching webhook signature")
)

// Verify checks a call as its receiver should, before it parses the body: body must be
// the raw bytes received. It accepts the call when webhook-timestamp is within
// tolerance of now (in the past or the future) and one of the space-separated
// signatures of webhook-signature is a v1 signature of the id, timestamp and body under
// secret; signatures of other versions are skipped, as the specification asks, so that
// a sender can sign with several schemes or, during a rotation, several keys. The
// signatures are compared in constant time. Verify refuses everything under the zero
// Secret.
func Verify(secret Secret, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if secret.IsZero() {
		return errors.New("verify webhook: no secret to verify with")
	}
	id, stamp, signatures := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || stamp == "" || signatures == "" {
		return fmt.Errorf("verify webhook: %w: want %s, %s and %s", ErrMissingHeader, HeaderID, HeaderTimestamp, HeaderSignature)
	}
	unix, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return fmt.Errorf("verify webhook: %w: %s is not unix seconds", ErrTimestamp, HeaderTimestamp)
	}
	if skew := now.Sub(time.Unix(unix, 0)); skew > tolerance || -skew > tolerance {
		return fmt.Errorf("verify webhook: %w: %s is %s from now, beyond %s", ErrTimestamp, HeaderTimestamp, skew.Round(time.Second), tolerance)
	}
	want := secret.mac(id, unix, body)
	for _, versioned := range strings.Fields(signatures) {
		version, encoded, ok := strings.Cut(versioned, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			continue
		}
		// hmac.Equal takes the same time wherever the first difference is, so a
		// forger learns nothing from how fast a guess is refused.
		if hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("verify webhook: %w", ErrNoSignature)
}
