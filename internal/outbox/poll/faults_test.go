package poll

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/outbox"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/internal/webhooksig"
)

// A broker unreachable for longer than the outage backoff cap: no event may reach the
// DLQ, every event keeps its place, and all are delivered once the broker is back.
func TestRelayOutageNeverDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := testenv.NewKafkaProxy(t)
	b.cfg.ClientOpts = proxy.ClientOpts()
	b.cfg.MaxRejections = 1 // a single misclassified failure would dead-letter
	startRelay(t, b.newRelay(t))

	// Warm up: the relay is connected when the fault starts.
	b.insert(t, newMessage(t, "warm-up", 0))
	b.waitAllPublished(t, 1, 15*time.Second)

	// Requests vanish on the way to the broker; connections stay open.
	if _, err := proxy.Proxy.AddToxic("blackhole", "timeout", "upstream", 1, toxiclient.Attributes{"timeout": 0}); err != nil {
		t.Fatalf("add toxic: %v", err)
	}
	var msgs []outbox.Message
	for i := range 20 {
		msgs = append(msgs, newMessage(t, fmt.Sprintf("agg-%d", i), 0))
	}
	b.insert(t, msgs...)

	// Outlast the backoff cap several times over.
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		if got := b.failures(t, "transport"); got < 4 {
			return false, fmt.Sprintf("%v transport failures, want at least 4", got)
		}
		return true, ""
	})
	// The counter moves just before the batch's failures are stored: poll the rows.
	testenv.WaitFor(t, 5*time.Second, func() (bool, string) {
		got := b.count(t, `SELECT count(*) FROM outbox_events WHERE status = 'pending' AND attempts > 0 AND last_error IS NOT NULL`)
		return got > 0, "no pending event shows attempts and last_error during the outage, want the failures recorded"
	})
	// The course's SLO gauge shows the backlog, and the oldest event's age grows: that
	// is what operators are alerted on during an outage, not the DLQ.
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		if got := b.metric(t, "outbox_pending_count"); got != float64(len(msgs)) {
			return false, fmt.Sprintf("outbox_pending_count %v, want %d", got, len(msgs))
		}
		if got := b.metric(t, "outbox_oldest_pending_age_seconds"); got <= 0 {
			return false, fmt.Sprintf("outbox_oldest_pending_age_seconds %v, want > 0", got)
		}
		return true, ""
	})
	if err := proxy.Proxy.RemoveToxic("blackhole"); err != nil {
		t.Fatalf("remove toxic: %v", err)
	}

	b.waitAllPublished(t, len(msgs)+1, 30*time.Second)
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		if got := b.metric(t, "outbox_pending_count"); got != 0 {
			return false, fmt.Sprintf("outbox_pending_count %v after the drain, want 0", got)
		}
		return true, ""
	})
	if got := b.count(t, `SELECT count(*) FROM outbox_dlq`); got != 0 {
		t.Errorf("DLQ rows after an outage: %d, want 0", got)
	}
	if got := b.failures(t, "rejected"); got != 0 {
		t.Errorf("rejected failures: %v, want 0", got)
	}
	records := b.consume(t, len(msgs)+1, 15*time.Second)
	seen := map[string]bool{}
	for _, rec := range records {
		seen[header(rec, event.HeaderID)] = true
	}
	for _, m := range msgs {
		if !seen[m.ID.String()] {
			t.Errorf("event %s was not delivered after the outage", m.ID)
		}
	}
}

// A record the broker refuses (larger than the topic's max.message.bytes) is a poison
// event: dead-lettered after MaxRejections, alerted, and not in anyone else's way,
// except later events of its own aggregate. Replayed once the topic accepts it, it is
// delivered, with the same id, before its successors.
func TestRelayDeadLettersPoisonEventAndReplaysIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setTopicMaxMessageBytes(t, b, 4096)

	var alertsMu sync.Mutex
	var alerts []webhookAlert
	secret, err := webhooksig.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	webhook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("alert body: %v", err)
		}
		if err := webhooksig.Verify(secret, r.Header, body, time.Now(), webhooksig.Tolerance); err != nil {
			t.Errorf("alert signature: %v", err)
		}
		var a webhookAlert
		if err := json.Unmarshal(body, &a); err != nil {
			t.Errorf("alert body: %v", err)
		}
		alertsMu.Lock()
		alerts = append(alerts, a)
		alertsMu.Unlock()
	}))
	t.Cleanup(webhook.Close)
	b.cfg.AlertWebhookURL = webhook.URL
	b.cfg.AlertRoutingKey = "test-routing-key"
	b.cfg.AlertSecret = secret
	b.cfg.Workers = 1 // the poison shares its batch with good events

	// Random padding: the producer compresses batches, and the broker's limit applies
	// to the compressed size.
	payload, err := json.Marshal(testEvent{Aggregate: "poison", N: 0, Padding: base64.StdEncoding.EncodeToString(randomBytes(t, 48<<10))})
	if err != nil {
		t.Fatal(err)
	}
	poison := outbox.Message{ID: newMessage(t, "poison", 0).ID, Type: "TestEvent", AggregateID: "poison", Payload: payload, OccurredAt: time.Now()}
	successor := newMessage(t, "poison", 1)
	b.insert(t, poison, successor)
	var others []outbox.Message
	for i := range 10 {
		others = append(others, newMessage(t, fmt.Sprintf("agg-%d", i), 0))
	}
	b.insert(t, others...)
	r := b.newRelay(t)
	startRelay(t, r)

	testenv.WaitFor(t, 20*time.Second, func() (bool, string) {
		alertsMu.Lock()
		defer alertsMu.Unlock()
		if len(alerts) == 0 {
			return false, "no alert received by the webhook"
		}
		return true, ""
	})
	alertsMu.Lock()
	got := alerts[0]
	alertsMu.Unlock()
	if got.RoutingKey != "test-routing-key" || got.EventAction != "trigger" || got.DedupKey != poison.ID.String() ||
		got.Payload.Severity != "error" || got.Payload.CustomDetails.EventID != poison.ID {
		t.Errorf("alert = %+v, want a trigger for event %s with the routing key", got, poison.ID)
	}

	type state struct {
		Status     string
		Attempts   int
		Rejections int
	}
	rowState := func(id any) state {
		var s state
		if err := b.pool.QueryRow(context.Background(), `SELECT status, attempts, rejections FROM outbox_events WHERE id = $1`, id).
			Scan(&s.Status, &s.Attempts, &s.Rejections); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if diff := cmp.Diff(state{"failed", 5, 5}, rowState(poison.ID)); diff != "" {
		t.Errorf("poison event (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(state{"pending", 0, 0}, rowState(successor.ID)); diff != "" {
		t.Errorf("successor of the poison event, waiting behind it (-want +got):\n%s", diff)
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_published WHERE aggregate_id LIKE 'agg-%'`); n != len(others) {
		t.Errorf("other aggregates published: %d, want %d", n, len(others))
	}
	if n := b.count(t, `SELECT count(*) FROM outbox_dlq WHERE event_id = $1 AND replayed_at IS NULL`, poison.ID); n != 1 {
		t.Errorf("DLQ rows for the poison event: %d, want 1", n)
	}

	// The fix: the topic accepts larger records. Then an operator replays the event.
	setTopicMaxMessageBytes(t, b, 1<<20)
	admin := httptest.NewServer(b.adminHandler("secret", r.Notify))
	t.Cleanup(admin.Close)
	resp := adminRequest(t, admin.URL, http.MethodPost, "/admin/dlq/"+poison.ID.String()+"/replay", "secret")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("replay: status %d, want 200", resp.StatusCode)
	}
	b.waitAllPublished(t, len(others)+2, 20*time.Second)
	if n := b.count(t, `SELECT count(*) FROM outbox_dlq WHERE replayed_at IS NOT NULL`); n != 1 {
		t.Errorf("DLQ rows marked replayed: %d, want 1", n)
	}
	var order []string
	for _, rec := range b.consume(t, len(others)+2, 15*time.Second) {
		if string(rec.Key) == "poison" {
			order = append(order, header(rec, event.HeaderID))
		}
	}
	if diff := cmp.Diff([]string{poison.ID.String(), successor.ID.String()}, order); diff != "" {
		t.Errorf("records of the poison aggregate (-want +got):\n%s", diff)
	}
}

// adminHandler mounts the admin endpoints the way cmd/api does, minus its router.
func (b *testBundle) adminHandler(token string, notify func()) http.Handler {
	dlq := outbox.NewDLQ(b.pool, b.logger)
	mux := http.NewServeMux()
	mux.Handle("GET /admin/dlq", dlq.HandleList())
	mux.Handle("POST /admin/dlq/{event_id}/replay", dlq.HandleReplay(notify))
	return outbox.RequireBearerToken(token)(mux)
}

func adminRequest(t *testing.T, base, method, path, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func setTopicMaxMessageBytes(t *testing.T, b *testBundle, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.kafkaAdmin(t).AlterTopicConfigs(ctx,
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr(fmt.Sprint(n))}}, b.topic)
	if err == nil {
		_, err = resp.On(b.topic, nil)
	}
	if err != nil {
		t.Fatalf("set max.message.bytes of %s: %v", b.topic, err)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
