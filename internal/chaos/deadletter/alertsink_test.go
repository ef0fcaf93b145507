package deadletter

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/webhooksig"
)

// The sink counts an alert only when it carries a valid signature under the secret it
// gave the API: an unsigned, forged or altered call is a call that is not an alert.
func TestAlertSinkCountsOnlySignedAlerts(t *testing.T) {
	t.Parallel()
	sink, err := StartAlertSink()
	if err != nil {
		t.Fatalf("StartAlertSink: %v", err)
	}
	t.Cleanup(sink.Close)
	otherSecret, err := webhooksig.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	body := []byte(`{"event_action":"trigger","dedup_key":"signed"}`)
	post := func(name string, sign func(http.Header), body []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, sink.url, bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sign(req.Header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
	}

	post("signed", func(h http.Header) { sink.secret.SetHeaders(h, "signed", time.Now(), body) }, body)
	post("unsigned", func(http.Header) {}, []byte(`{"dedup_key":"unsigned"}`))
	post("another secret", func(h http.Header) {
		otherSecret.SetHeaders(h, "forged", time.Now(), []byte(`{"dedup_key":"forged"}`))
	}, []byte(`{"dedup_key":"forged"}`))
	post("altered", func(h http.Header) { sink.secret.SetHeaders(h, "altered", time.Now(), body) },
		[]byte(`{"event_action":"trigger","dedup_key":"altered"}`))

	received, bad := sink.Received()
	if diff := cmp.Diff(map[string]int{"signed": 1}, received); diff != "" {
		t.Errorf("alerts counted (-want +got):\n%s", diff)
	}
	if bad != 3 {
		t.Errorf("calls refused: %d, want 3 (unsigned, another secret, altered)", bad)
	}
}
