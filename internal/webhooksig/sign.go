// Package webhooksig signs webhook calls the way the Standard Webhooks specification
// (https://www.standardwebhooks.com/, symmetric scheme "v1") does, and verifies them
// the way a receiver would.
//
// A signed call carries three headers: webhook-id (the message's id, the same on every
// attempt to deliver it, so that a receiver can drop a duplicate), webhook-timestamp
// (the attempt's time, unix seconds, so that a receiver can refuse a replay) and
// webhook-signature ("v1," and the base64 HMAC-SHA256 of "<id>.<timestamp>.<body>"
// under the shared secret). The secret is written "whsec_" and the base64 of its key.
//
//	secret, err := webhooksig.ParseSecret(os.Getenv("ALERT_WEBHOOK_SECRET"))
//	secret.SetHeaders(req.Header, eventID, time.Now(), body) // sender
//	err = webhooksig.Verify(secret, r.Header, body, time.Now(), webhooksig.Tolerance) // receiver
//
// Any of the specification's reference libraries verifies what this package signs.
package webhooksig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a signed call, as the specification names them.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// secretPrefix marks a symmetric Standard Webhooks secret.
const secretPrefix = "whsec_"

// The key lengths the specification allows for a symmetric secret: at least 192 bits,
// at most 512.
const (
	MinKeyBytes = 24
	MaxKeyBytes = 64
)

// A Secret is the key shared by the sender and the receiver. The zero Secret signs
// nothing (IsZero). It never prints its key: fmt and slog show "whsec_<redacted>".
type Secret struct {
	key []byte
}

// ParseSecret reads a secret written "whsec_<base64 of the key>", as the specification
// serializes it, with a key of MinKeyBytes to MaxKeyBytes. Its errors never quote s.
func ParseSecret(s string) (Secret, error) {
	encoded, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return Secret{}, errors.New(`the secret does not start with "whsec_": write it whsec_ followed by the base64 of a random key, e.g. whsec_$(openssl rand -base64 32)`)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return Secret{}, errors.New("the secret after whsec_ is not standard base64 (with its = padding): generate one with openssl rand -base64 32")
	}
	if len(key) < MinKeyBytes || len(key) > MaxKeyBytes {
		return Secret{}, fmt.Errorf("the secret's key is %d bytes, want %d to %d (192 to 512 bits): generate one with openssl rand -base64 32",
			len(key), MinKeyBytes, MaxKeyBytes)
	}
	return Secret{key: key}, nil
}

// IsZero reports whether s is the zero Secret: no key, nothing to sign with.
func (s Secret) IsZero() bool { return len(s.key) == 0 }

// Equal reports whether s and o hold the same key, comparing in constant time.
func (s Secret) Equal(o Secret) bool { return hmac.Equal(s.key, o.key) }

// String hides the key; so do GoString and LogValue.
func (s Secret) String() string {
	if s.IsZero() {
		return ""
	}
	return secretPrefix + "<redacted>"
}

// GoString hides the key from %#v.
func (s Secret) GoString() string { return "webhooksig.Secret(" + strconv.Quote(s.String()) + ")" }

// LogValue hides the key from slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Sign returns the webhook-signature value of one attempt to deliver body: "v1," and
// the base64 HMAC-SHA256 of "<id>.<timestamp>.<body>", the timestamp in unix seconds.
// id must not contain a dot, or two different (id, body) pairs could sign alike.
func (s Secret) Sign(id string, timestamp time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(s.mac(id, timestamp.Unix(), body))
}

// SetHeaders sets the three headers of a signed call on h.
func (s Secret) SetHeaders(h http.Header, id string, timestamp time.Time, body []byte) {
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(timestamp.Unix(), 10))
	h.Set(HeaderSignature, s.Sign(id, timestamp, body))
}

// mac is the raw HMAC-SHA256 of the signed content.
func (s Secret) mac(id string, unix int64, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(id + "." + strconv.FormatInt(unix, 10) + "."))
	m.Write(body)
	return m.Sum(nil)
}
