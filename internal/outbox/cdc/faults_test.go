package cdc

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/internal/webhooksig"
)

// A Kafka outage holds the stream and the slot where they are: no event is
// dead-lettered however long it lasts, the rows count their attempts, and the slot is
// never confirmed past an event Kafka has not acknowledged, so a relay that dies during
// the outage leaves every event to the next one.
func TestOutageHoldsTheSlotAndDeadLettersNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := testenv.NewKafkaProxy(t)
	b.cfg.ClientOpts = proxy.ClientOpts()
	b.cfg.MaxRejections = 1 // an outage counted as a rejection would dead-letter at once
	relay := b.start(t)
	b.insert(t, "up", 5)
	b.waitPublished(t, 5, 90*time.Second)

	if err := proxy.Proxy.Disable(); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "down", 5)
	// The stream waits on the first batch of them: its rows count the retries.
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id LIKE 'down-%' AND attempts >= 3`)
		return n > 0, "no row counted three failed attempts"
	})
	if got := b.count(t, `SELECT count(*) FROM outbox_events WHERE status <> 'pending'`) +
		b.count(t, `SELECT count(*) FROM outbox_dlq`); got != 0 {
		t.Errorf("%d rows failed or dead-lettered during an outage, want 0", got)
	}
	if got := relay.metric(t, "outbox_publish_failures_total", "transport"); got == 0 {
		t.Errorf("outbox_publish_failures_total{reason=transport} = 0 during an outage")
	}

	// The relay dies in the outage; the next one, with Kafka back, publishes every event
	// the first never got acknowledged: only the slot's confirmed position tells it where
	// to start.
	relay.stop()
	if err := proxy.Proxy.Enable(); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	b.waitPublished(t, 10, 90*time.Second)
}

// A record the broker refuses (larger than the topic's max.message.bytes) is retried,
// dead-lettered after MaxRejections, and the stream moves on to the next event: a poison
// record cannot hold it for ever. A later event of the same aggregate goes to the DLQ
// behind it. Each dead letter raises one alert at the webhook, as in polling mode.
func TestPoisonRecordIsDeadLetteredAndTheStreamMovesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.cfg.MaxRejections = 3
	secret, err := webhooksig.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	webhook := newAlertRecorder(t, secret)
	b.cfg.AlertWebhookURL = webhook.URL
	b.cfg.AlertSecret = secret
	setTopicMaxMessageBytes(t, b, 4096)
	relay := b.start(t)

	b.insert(t, "ok", 2)
	// Random bytes, so that the producer's compression cannot bring it under the limit.
	noise := make([]byte, 30_000)
	rand.Read(noise)
	poison := b.insertPayload(t, "poison-agg", base64.StdEncoding.EncodeToString(noise))
	follower := b.insertPayload(t, "poison-agg", "small")
	after := b.insert(t, "after", 3)

	b.waitPublished(t, 5, 90*time.Second)
	var status string
	var rejections int
	if err := b.pool.QueryRow(context.Background(), `SELECT status, rejections FROM outbox_events WHERE id = $1`, poison).
		Scan(&status, &rejections); err != nil {
		t.Fatal(err)
	}
	if status != "failed" || rejections != 3 {
		t.Errorf("poison row: status %s after %d rejections, want failed after 3", status, rejections)
	}
	// The follower is dead-lettered behind the poison event, which can come after the
	// other aggregates' events are published: wait for it rather than read once.
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		got := b.count(t, `SELECT count(*) FROM outbox_dlq WHERE event_id = ANY($1)`, []any{poison, follower})
		return got == 2, fmt.Sprintf("%d of the poison event and its follower in outbox_dlq, want 2", got)
	})
	if got := b.count(t, `SELECT count(*) FROM outbox_published WHERE id = ANY($1)`, after); got != 3 {
		t.Errorf("%d of the 3 events after the poison record published, want 3", got)
	}
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		got := relay.metric(t, "outbox_dlq_total", "")
		return got == 2, fmt.Sprintf("outbox_dlq_total = %v, want 2", got)
	})
	// insertPayload scans the id as pgx's [16]byte.
	want := map[string]int{uuid.UUID(poison.([16]byte)).String(): 1, uuid.UUID(follower.([16]byte)).String(): 1}
	if diff := cmp.Diff(want, webhook.alerts()); diff != "" {
		t.Errorf("alerts by dedup_key (-want +got):\n%s", diff)
	}
}

// alertRecorder is a webhook that counts the alerts it receives by dedup_key, those
// signed with its secret only.
type alertRecorder struct {
	*httptest.Server
	mu       sync.Mutex
	received map[string]int
}

func newAlertRecorder(t *testing.T, secret webhooksig.Secret) *alertRecorder {
	rec := &alertRecorder{received: map[string]int{}}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body struct { // the fields of the webhook body that the test reads
			EventAction string `json:"event_action"`
			DedupKey    string `json:"dedup_key"`
		}
		raw, err := io.ReadAll(req.Body)
		if err == nil {
			err = webhooksig.Verify(secret, req.Header, raw, time.Now(), webhooksig.Tolerance)
		}
		if err == nil {
			err = json.Unmarshal(raw, &body)
		}
		if err != nil || body.EventAction != "trigger" {
			http.Error(w, "not a signed alert", http.StatusBadRequest)
			return
		}
		rec.mu.Lock()
		rec.received[body.DedupKey]++
		rec.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *alertRecorder) alerts() map[string]int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return maps.Clone(rec.received)
}

// insertPayload commits one event whose payload is {"pad": pad}.
func (b *testBundle) insertPayload(t *testing.T, aggregate, pad string) any {
	t.Helper()
	var id any
	err := b.pool.QueryRow(context.Background(), `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload)
		VALUES (gen_random_uuid(), 'TestEvent', $1, jsonb_build_object('pad', $2::text)) RETURNING id`,
		aggregate, pad).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func setTopicMaxMessageBytes(t *testing.T, b *testBundle, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	value := fmt.Sprint(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resps, err := kadm.NewClient(cl).AlterTopicConfigs(ctx,
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &value}}, b.topic)
	if err == nil {
		var resp kadm.AlterConfigsResponse
		resp, err = resps.On(b.topic, nil)
		if err == nil {
			err = resp.Err
		}
	}
	if err != nil {
		t.Fatalf("set max.message.bytes of %s: %v", b.topic, err)
	}
	// The controller accepts the change before the broker applies it.
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		configs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, b.topic)
		if err != nil {
			return false, err.Error()
		}
		for _, c := range configs {
			for _, kv := range c.Configs {
				if kv.Key == "max.message.bytes" && kv.Value != nil && *kv.Value == value {
					return true, ""
				}
			}
		}
		return false, "broker does not report max.message.bytes=" + value + " yet"
	})
}

// A relay whose replication session the server ended (a walsender terminated, or timed
// out while the relay was frozen) must stop publishing for that session at its next
// keepalive, even in the middle of an outage: the slot may belong to another relay by
// now, and the events are streamed again by whichever session holds it. It then opens
// a new session, which is all this test can see from outside: a new walsender on the
// slot while Kafka is still down.
func TestSessionEndedDuringAnOutageStopsItsRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := testenv.NewKafkaProxy(t)
	b.cfg.ClientOpts = proxy.ClientOpts()
	b.start(t)
	b.insert(t, "up", 1)
	b.waitPublished(t, 1, 90*time.Second)

	if err := proxy.Proxy.Disable(); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "down", 1)
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		n := b.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id LIKE 'down-%' AND attempts >= 2`)
		return n > 0, "the relay is not retrying the event yet"
	})
	slot := DefaultSlot(b.dbURL)
	first := b.count(t, `SELECT coalesce(max(active_pid), 0) FROM pg_replication_slots WHERE slot_name = $1`, slot)
	if got := b.count(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND pg_terminate_backend(active_pid)`, slot); got != 1 {
		t.Fatalf("terminated %d walsenders of slot %s, want 1", got, slot)
	}
	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		pid := b.count(t, `SELECT coalesce(max(active_pid), 0) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		return pid != 0 && pid != first, fmt.Sprintf("walsender of the slot: pid %d, was %d before it was terminated; Kafka still down", pid, first)
	})
}
