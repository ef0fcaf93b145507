package antifraud

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// hostileValue is the JSON value of a payment whose user and currency are given as raw
// JSON string contents, so that a test can write escapes (\u0000) that encoding/json
// would never produce from a Go string.
func hostileValue(userJSON, currencyJSON string) []byte {
	return fmt.Appendf(nil, `{"payment_id":"%s","user_id":"%s","amount":100,"currency":"%s","created_at":"2026-11-30T09:15:42Z"}`,
		uuid.New(), userJSON, currencyJSON)
}

// withValue gives r another payload and, to keep the contract's key, that payload's
// payment id as key.
func withValue(t *testing.T, r *kgo.Record, value []byte) *kgo.Record {
	t.Helper()
	r.Value = value
	var p struct {
		PaymentID string `json:"payment_id"`
	}
	if err := json.Unmarshal(value, &p); err != nil {
		t.Fatalf("decode test payload: %v", err)
	}
	r.Key = []byte(p.PaymentID)
	return r
}

// longUserID is a user id that no btree index accepts: 4,000 random hex digits do not
// compress below the index row limit (2,704 bytes).
func longUserID() string {
	b := make([]byte, 2000)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

// TestHostileRecordsDoNotStallThePartition puts records that another producer could
// write, and that the database refuses, between good ones: each must be dead-lettered,
// and the good record after them decided.
func TestHostileRecordsDoNotStallThePartition(t *testing.T) {
	t.Parallel()
	b := setup(t, 1)
	c := b.start(t, b.config())

	good := func() *kgo.Record { return eventRecord(t, uuid.New(), newPayment("u-1", 100, time.Now())) }
	nulHeader := good()
	nulHeader.Headers = append(nulHeader.Headers[1:], kgo.RecordHeader{Key: "trace", Value: []byte("a\x00b")})
	binaryHeader := good()
	binaryHeader.Headers = append(binaryHeader.Headers[1:], kgo.RecordHeader{Key: "k\xff\x00", Value: []byte{0xff, 0xfe, 0}})
	otherKey := good()
	otherKey.Key = []byte(uuid.NewString())

	b.produce(t,
		good(),
		withValue(t, good(), hostileValue(`u-\u0000`, "EUR")),
		withValue(t, good(), hostileValue("u-1", `EU\u0000`)),
		nulHeader,
		binaryHeader,
		withValue(t, good(), hostileValue(longUserID(), "EUR")),
		withValue(t, good(), hostileValue(`u-\ud800`, "EUR")),
		otherKey,
		good(),
	)
	// Bounded: on a consumer that stalls, the test fails here instead of hanging.
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, "SELECT count(*) FROM decisions")
		d := b.count(t, "SELECT count(*) FROM consumer_dead_letters")
		return n == 2 && d == 7, fmt.Sprintf("%d of 2 decisions, %d of 7 dead letters", n, d)
	})

	got := deadLetterReasons(t, b)
	want := map[int64]string{
		1: PoisonInvalidPayload,
		2: PoisonInvalidPayload,
		3: PoisonMissingEventID,
		4: PoisonMissingEventID,
		5: PoisonInvalidPayload,
		6: PoisonInvalidPayload,
		7: PoisonInvalidKey,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dead letters by offset mismatch (-want +got):\n%s", diff)
	}
	// Headers that are not text are stored escaped, never altered.
	for _, tt := range []struct {
		offset   int64
		key, b64 string
	}{
		{3, "trace", base64.StdEncoding.EncodeToString([]byte("a\x00b"))},
		{4, strconv.QuoteToASCII("k\xff\x00"), base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe, 0})},
	} {
		var got string
		err := b.pool.QueryRow(context.Background(),
			`SELECT headers -> $2::text ->> 'base64' FROM consumer_dead_letters WHERE "offset" = $1`, tt.offset, tt.key).Scan(&got)
		if err != nil || got != tt.b64 {
			t.Errorf("dead letter at offset %d: header %s = %q, %v; want base64 %q", tt.offset, tt.key, got, err, tt.b64)
		}
	}

	if err := c.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if got := b.committed(t); got[0] != 9 {
		t.Errorf("committed offset after stop = %d, want 9", got[0])
	}
}

// deadLetterReasons returns the reason of each dead letter, by offset.
func deadLetterReasons(t *testing.T, b *bundle) map[int64]string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT "offset", reason FROM consumer_dead_letters`)
	if err != nil {
		t.Fatalf("select dead letters: %v", err)
	}
	defer rows.Close()
	got := map[int64]string{}
	for rows.Next() {
		var offset int64
		var reason string
		if err := rows.Scan(&offset, &reason); err != nil {
			t.Fatalf("scan dead letter: %v", err)
		}
		got[offset] = reason
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("select dead letters: %v", err)
	}
	return got
}

func TestHeadersJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"none", map[string]string{}, `{}`},
		{"text", map[string]string{"X-Event-Type": "PaymentCreated"}, `{"X-Event-Type":"PaymentCreated"}`},
		{"NUL in a value", map[string]string{"trace": "a\x00b"}, `{"trace":{"base64":"YQBi"}}`},
		{"invalid UTF-8 value", map[string]string{"trace": "\xff"}, `{"trace":{"base64":"/w=="}}`},
		{"NUL in a key", map[string]string{"k\x00": "v"}, `{"\"k\\x00\"":"v"}`},
		{"key that starts with a quote", map[string]string{`"k`: "v"}, `{"\"\\\"k\"":"v"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := headersJSON(tt.headers); got != tt.want {
				t.Errorf("headersJSON(%q) = %s, want %s", tt.headers, got, tt.want)
			}
		})
	}
}

func TestStorableText(t *testing.T) {
	t.Parallel()
	if got, want := storableText("a\x00b\xffc"), `a\x00b`+"\uFFFD"+"c"; got != want {
		t.Errorf("storableText = %q, want %q", got, want)
	}
	long := storableText(strings.Repeat("x", 10*maxDetailBytes))
	if len(long) > maxDetailBytes+len("...") {
		t.Errorf("storableText of %d bytes kept %d, want at most %d", 10*maxDetailBytes, len(long), maxDetailBytes+3)
	}
}
