package verify

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/testenv"
)

// Each rule of the record contract catches the record that breaks it, and only that
// record; the first offender is kept as the example.
func TestTopicContentsChecksTheRecordContract(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		modify               func(r *kgo.Record)
		wantKey, wantHeaders int
		wantPayload          int
		wantExample          string
	}{
		{name: "the relay's record", modify: func(*kgo.Record) {}},
		{
			name:    "key is not the payment id",
			modify:  func(r *kgo.Record) { r.Key = []byte("u-42") },
			wantKey: 1, wantExample: `partition 2 offset 7: key "u-42"`,
		},
		{
			name:        "no X-Event-Id",
			modify:      func(r *kgo.Record) { r.Headers = r.Headers[1:] },
			wantHeaders: 1, wantExample: "partition 2 offset 7: no X-Event-Id header",
		},
		{
			name:        "X-Event-Id not a UUID",
			modify:      func(r *kgo.Record) { r.Headers[0].Value = []byte("42") },
			wantHeaders: 1, wantExample: `X-Event-Id "42"`,
		},
		{
			name:        "another event type",
			modify:      func(r *kgo.Record) { r.Headers[1].Value = []byte("payment.created") },
			wantHeaders: 1, wantExample: `X-Event-Type "payment.created", want one of PaymentCreated`,
		},
		{
			name:        "occurred at not RFC 3339",
			modify:      func(r *kgo.Record) { r.Headers[2].Value = []byte("1764494142") },
			wantHeaders: 1, wantExample: `X-Event-Occurred-At "1764494142"`,
		},
		{
			name:        "payload without amount",
			modify:      func(r *kgo.Record) { r.Value = deleteField(t, r.Value, "amount") },
			wantPayload: 1, wantExample: "payload without amount",
		},
		{
			name:        "payload not JSON",
			modify:      func(r *kgo.Record) { r.Value = []byte("PaymentCreated{...}") },
			wantPayload: 1, wantExample: "value is not a JSON object",
		},
		{
			name:        "amount as a string",
			modify:      func(r *kgo.Record) { r.Value = []byte(strings.Replace(string(r.Value), "1999", `"1999"`, 1)) },
			wantPayload: 1, wantExample: "payload is not a PaymentCreated v1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := testenv.PaymentRecord(t, "payments.events", uuid.New(), uuid.New())
			r.Partition, r.Offset = 2, 7
			tt.modify(r)
			c := NewTopicContents()
			c.Add(r)
			c.Add(testenv.PaymentRecord(t, "payments.events", uuid.New(), uuid.New())) // a good one after it
			got := []int{c.BadKey.Count, c.BadHeaders.Count, c.BadPayload.Count}
			if diff := cmp.Diff([]int{tt.wantKey, tt.wantHeaders, tt.wantPayload}, got); diff != "" {
				t.Errorf("bad key, headers, payload (-want +got):\n%s", diff)
			}
			examples := c.BadKey.First + c.BadHeaders.First + c.BadPayload.First
			if !strings.Contains(examples, tt.wantExample) {
				t.Errorf("first example %q, want it to contain %q", examples, tt.wantExample)
			}
		})
	}
}

func deleteField(t *testing.T, value []byte, field string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(value, &m); err != nil {
		t.Fatalf("decode payload: %v", err)
	}
	delete(m, field)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("encode payload: %v", err)
	}
	return b
}

// Copies of one event are one id; a retry under a new id is a second id for the payment.
func TestTopicContentsIdentities(t *testing.T) {
	t.Parallel()
	paymentID, first, second := uuid.New(), uuid.New(), uuid.New()
	c := NewTopicContents()
	for _, id := range []uuid.UUID{first, first, second} {
		c.Add(testenv.PaymentRecord(t, "payments.events", paymentID, id))
	}
	p := paymentID.String()
	if diff := cmp.Diff([]string{first.String(), second.String()}, c.PaymentEventIDs[p]); diff != "" {
		t.Errorf("event ids of the payment (-want +got):\n%s", diff)
	}
	if c.PaymentEvents[p] != 3 || c.EventCopies[first.String()] != 2 || c.Records != 3 {
		t.Errorf("records %d, of the payment %d, copies of the first id %d; want 3, 3, 2", c.Records, c.PaymentEvents[p], c.EventCopies[first.String()])
	}
	wantFields := []PaymentFields{{UserID: "u-42", Amount: 1999, Currency: "EUR"}}
	if diff := cmp.Diff(wantFields, c.PaymentPayloads[p]); diff != "" {
		t.Errorf("payloads of the payment (-want +got):\n%s", diff)
	}
}

// Records of an aborted Kafka transaction never reached a read-committed consumer, so
// they are not delivered; and a topic that ends on a transaction marker is still read to
// its end.
func TestReadTopicIsReadCommitted(t *testing.T) {
	t.Parallel()
	brokers := testenv.KafkaBrokers(t)
	topic := testenv.NewTopic(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.TransactionalID("chaos-verifier-test-"+topic))
	if err != nil {
		t.Fatalf("new Kafka client: %v", err)
	}
	defer cl.Close()
	inTransaction := func(end kgo.TransactionEndTry, records ...*kgo.Record) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction: %v", err)
		}
		if err := cl.ProduceSync(ctx, records...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		if err := cl.EndTransaction(ctx, end); err != nil {
			t.Fatalf("end transaction: %v", err)
		}
	}
	committedPayment, abortedPayment := uuid.New(), uuid.New()
	inTransaction(kgo.TryAbort, testenv.PaymentRecord(t, "", abortedPayment, uuid.New()))
	inTransaction(kgo.TryCommit, testenv.PaymentRecord(t, "", committedPayment, uuid.New()))

	// EndTransaction returns once the coordinator has decided; the commit marker
	// reaches the partition a moment later, and until then the committed record is
	// beyond the last stable offset, where a read-committed reader stops. Wait for it
	// (ReadTopic is a snapshot up to that offset, by design), then check.
	var got TopicContents
	testenv.WaitFor(t, 30*time.Second, func() (bool, string) {
		var err error
		if got, err = ReadTopic(ctx, brokers, topic); err != nil {
			t.Fatalf("ReadTopic: %v", err)
		}
		return got.Records > 0, "the committed record is not readable yet"
	})
	want := map[string]int{committedPayment.String(): 1}
	if diff := cmp.Diff(want, got.PaymentEvents); diff != "" {
		t.Errorf("events per payment (-want +got):\n%s", diff)
	}
	if got.Records != 1 || got.Partitions != 1 {
		t.Errorf("records %d, partitions %d; want 1 and 1", got.Records, got.Partitions)
	}
}
