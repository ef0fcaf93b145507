package webhooksig

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// testSecret is the secret of the specification's test vector.
func testSecret(t *testing.T) Secret {
	t.Helper()
	secret, err := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	return secret
}

func TestVerify(t *testing.T) {
	t.Parallel()
	secret := testSecret(t)
	other, err := ParseSecret("whsec_" + "b3RoZXItc2VjcmV0LW9mLTMyLWJ5dGVzLWxvbmctLS0=")
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"dedup_key":"0b5d7c1e-7b1a-4f0e-9a55-8f4f3c2a6b10"}`)
	const id = "0b5d7c1e-7b1a-4f0e-9a55-8f4f3c2a6b10"
	signed := func(at time.Time) http.Header {
		h := http.Header{}
		secret.SetHeaders(h, id, at, body)
		return h
	}
	tests := []struct {
		name    string
		headers func() http.Header
		body    []byte
		want    error // nil: accepted
	}{
		{"signed now", func() http.Header { return signed(now) }, body, nil},
		{"signed at the edge of the tolerance, in the past", func() http.Header { return signed(now.Add(-Tolerance)) }, body, nil},
		{"signed at the edge of the tolerance, in the future", func() http.Header { return signed(now.Add(Tolerance)) }, body, nil},
		{"stale: signed longer ago than the tolerance", func() http.Header { return signed(now.Add(-Tolerance - time.Second)) }, body, ErrTimestamp},
		{"from the future beyond the tolerance", func() http.Header { return signed(now.Add(Tolerance + time.Second)) }, body, ErrTimestamp},
		{"timestamp not a number", func() http.Header {
			h := signed(now)
			h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10)+".0")
			return h
		}, body, ErrTimestamp},
		{"body changed by one byte", func() http.Header { return signed(now) }, append(body[:len(body)-2:len(body)-2], '1', '}'), ErrNoSignature},
		{"forged signature", func() http.Header {
			h := signed(now)
			h.Set(HeaderSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=")
			return h
		}, body, ErrNoSignature},
		{"signed with another secret", func() http.Header {
			h := http.Header{}
			other.SetHeaders(h, id, now, body)
			return h
		}, body, ErrNoSignature},
		{"id changed", func() http.Header {
			h := signed(now)
			h.Set(HeaderID, "another-id")
			return h
		}, body, ErrNoSignature},
		{"timestamp changed", func() http.Header {
			h := signed(now)
			h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix()-1, 10))
			return h
		}, body, ErrNoSignature},
		{"ours among several signatures", func() http.Header {
			h := signed(now)
			h.Set(HeaderSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1a,aGVsbG8= "+h.Get(HeaderSignature)+" v2,x")
			return h
		}, body, nil},
		{"our signature under another version", func() http.Header {
			h := signed(now)
			h.Set(HeaderSignature, "v1a,"+h.Get(HeaderSignature)[len("v1,"):])
			return h
		}, body, ErrNoSignature},
		{"no signature", func() http.Header {
			h := signed(now)
			h.Del(HeaderSignature)
			return h
		}, body, ErrMissingHeader},
		{"no id", func() http.Header {
			h := signed(now)
			h.Del(HeaderID)
			return h
		}, body, ErrMissingHeader},
	}
	for _, tt := range tests {
		err := Verify(secret, tt.headers(), tt.body, now, Tolerance)
		switch {
		case tt.want == nil && err != nil:
			t.Errorf("%s: Verify: %v, want it accepted", tt.name, err)
		case tt.want != nil && !errors.Is(err, tt.want):
			t.Errorf("%s: Verify: %v, want %v", tt.name, err, tt.want)
		}
	}
}

// The zero Secret verifies nothing, not even a call signed with the zero key.
func TestVerifyWithoutASecretRefuses(t *testing.T) {
	t.Parallel()
	now := time.Now()
	h := http.Header{}
	Secret{}.SetHeaders(h, "id", now, []byte("{}"))
	if err := Verify(Secret{}, h, []byte("{}"), now, Tolerance); err == nil {
		t.Error("Verify with the zero Secret accepted a call, want it refused")
	}
}
