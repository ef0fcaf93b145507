package chaos

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// transitionRecord is the record the relay writes for a later event of a payment.
func transitionRecord(t *testing.T, typ string, paymentID, eventID uuid.UUID, sequence int, offset int64) *kgo.Record {
	t.Helper()
	at := time.Date(2026, 11, 30, 9, 16, 0, 0, time.UTC)
	var payload any
	switch typ {
	case event.TypePaymentCaptured:
		payload = event.PaymentCaptured{PaymentID: paymentID, Sequence: sequence, UserID: "u-42", Amount: 1999, Currency: "EUR", CapturedAt: at}
	case event.TypePaymentRefunded:
		payload = event.PaymentRefunded{PaymentID: paymentID, Sequence: sequence, RefundID: uuid.New(), UserID: "u-42", Amount: 100, Currency: "EUR", RefundedTotal: 100, RefundedAt: at}
	case event.TypePaymentCancelled:
		payload = event.PaymentCancelled{PaymentID: paymentID, Sequence: sequence, UserID: "u-42", Amount: 1999, Currency: "EUR", CancelledAt: at}
	}
	value, err := json.Marshal(payload)
	if err != nil {
		t.Fatalf("encode %s: %v", typ, err)
	}
	r := event.Envelope{ID: eventID, Type: typ, Key: paymentID.String(), OccurredAt: at, Payload: value}.Record("payments.events", at)
	r.Offset = offset
	return r
}

// The topic's order is each event id's first occurrence in offset order: a copy of an
// earlier event after a later one does not move it.
func TestTopicContentsOrderByFirstOccurrence(t *testing.T) {
	t.Parallel()
	p, created, captured, refunded := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	c := newTopicContents()
	createdRecord := paymentRecord(t, "payments.events", p, created)
	c.add(createdRecord)
	c.add(transitionRecord(t, event.TypePaymentCaptured, p, captured, 2, 1))
	c.add(paymentRecord(t, "payments.events", p, created)) // a late copy
	c.add(transitionRecord(t, event.TypePaymentRefunded, p, refunded, 3, 3))
	var got []string
	for _, e := range c.PaymentOrder[p.String()] {
		got = append(got, fmt.Sprintf("%s %d", e.Type, e.Sequence))
	}
	if diff := cmp.Diff([]string{"PaymentCreated 1", "PaymentCaptured 2", "PaymentRefunded 3"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if n := c.BadHeaders.Count + c.BadPayload.Count + c.BadKey.Count; n != 0 {
		t.Errorf("%d contract violations, want 0: %+v %+v %+v", n, c.BadHeaders, c.BadPayload, c.BadKey)
	}
	if ids := c.TransitionEventIDs[p.String()]; len(ids[1]) != 1 || len(ids[2]) != 1 || len(ids[3]) != 1 {
		t.Errorf("event ids by sequence = %v, want one each for 1, 2, 3", ids)
	}
}

func TestDecodePayloadOfEachType(t *testing.T) {
	t.Parallel()
	p := uuid.New()
	for _, tt := range []struct {
		name    string
		record  *kgo.Record
		drop    string
		problem string
	}{
		{name: "capture", record: transitionRecord(t, event.TypePaymentCaptured, p, uuid.New(), 2, 0)},
		{name: "refund", record: transitionRecord(t, event.TypePaymentRefunded, p, uuid.New(), 3, 0)},
		{name: "cancel", record: transitionRecord(t, event.TypePaymentCancelled, p, uuid.New(), 2, 0)},
		{name: "refund without refund_id", record: transitionRecord(t, event.TypePaymentRefunded, p, uuid.New(), 3, 0), drop: "refund_id", problem: "PaymentRefunded payload without refund_id"},
		{name: "capture without sequence", record: transitionRecord(t, event.TypePaymentCaptured, p, uuid.New(), 2, 0), drop: "sequence", problem: "PaymentCaptured payload without sequence"},
		{name: "capture of sequence 1", record: transitionRecord(t, event.TypePaymentCaptured, p, uuid.New(), 1, 0), problem: "sequence 1"},
	} {
		value := tt.record.Value
		if tt.drop != "" {
			value = deleteField(t, value, tt.drop)
		}
		typ := event.HeaderValues(tt.record)[event.HeaderType]
		got, problem := decodePayload(typ, value)
		switch {
		case tt.problem == "" && (problem != "" || got.PaymentID != p.String()):
			t.Errorf("%s: decodePayload = %+v, %q; want payment %s and no problem", tt.name, got, problem, p)
		case tt.problem != "" && !strings.Contains(problem, tt.problem):
			t.Errorf("%s: problem %q, want one with %q", tt.name, problem, tt.problem)
		}
	}
}

// Each kind of broken lifecycle fails its own count, and a correct one fails none.
func TestFillOrder(t *testing.T) {
	t.Parallel()
	ev := func(typ string, seq int) TopicEvent {
		return TopicEvent{EventID: fmt.Sprintf("%s-%d", typ, seq), Type: typ, Sequence: seq}
	}
	created, captured := ev(event.TypePaymentCreated, 1), ev(event.TypePaymentCaptured, 2)
	refund3, refund4 := ev(event.TypePaymentRefunded, 3), ev(event.TypePaymentRefunded, 4)
	cancelled := ev(event.TypePaymentCancelled, 2)
	tests := []struct {
		name                      string
		order                     []TopicEvent
		committed                 CommittedLifecycle
		consumer                  []int
		wantOrder, wantLost       int
		wantPhantom, wantConsumer int
		wantMissing               int
	}{
		{name: "in order", order: []TopicEvent{created, captured, refund3, refund4}, committed: CommittedLifecycle{"refunded", 4}, consumer: []int{1, 2, 3, 4}},
		{name: "cancelled", order: []TopicEvent{created, cancelled}, committed: CommittedLifecycle{"cancelled", 2}, consumer: []int{1, 2}},
		{name: "capture before creation", order: []TopicEvent{captured, created}, committed: CommittedLifecycle{"captured", 2}, consumer: []int{1, 2}, wantOrder: 1},
		{name: "refunds swapped", order: []TopicEvent{created, captured, refund4, refund3}, committed: CommittedLifecycle{"refunded", 4}, consumer: []int{1, 2, 3, 4}, wantOrder: 1},
		{name: "committed refund without event", order: []TopicEvent{created, captured}, committed: CommittedLifecycle{"partially_refunded", 3}, consumer: []int{1, 2}, wantLost: 1, wantMissing: 1},
		{name: "event of an uncommitted transition", order: []TopicEvent{created, captured, refund3}, committed: CommittedLifecycle{"captured", 2}, consumer: []int{1, 2}, wantPhantom: 1},
		{name: "capture in the topic, cancel committed", order: []TopicEvent{created, captured}, committed: CommittedLifecycle{"cancelled", 2}, consumer: []int{1, 2}, wantPhantom: 1, wantLost: 0},
		{name: "consumer took them out of order", order: []TopicEvent{created, captured}, committed: CommittedLifecycle{"captured", 2}, consumer: []int{2, 1}, wantConsumer: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obs := Observed{Committed: committed("p1"), Topic: newTopicContents(), Decisions: map[string]int{"p1": 1},
				Lifecycles: map[string]CommittedLifecycle{"p1": tt.committed}, ConsumerOrder: map[string][]int{"p1": tt.consumer}, ConsumerOwnViolations: 0}
			obs.Topic.PaymentOrder["p1"] = tt.order
			obs.Topic.TransitionEventIDs["p1"] = map[int][]string{}
			for _, e := range tt.order {
				obs.Topic.TransitionEventIDs["p1"][e.Sequence] = append(obs.Topic.TransitionEventIDs["p1"][e.Sequence], e.EventID)
			}
			var r Report
			obs.Fill(&r)
			got := []int{r.OrderViolations, r.TransitionsLost, r.TransitionsPhantom, r.ConsumerOrderViolations, r.ConsumerTransitionsMissing}
			want := []int{tt.wantOrder, tt.wantLost, tt.wantPhantom, tt.wantConsumer, tt.wantMissing}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("order, lost, phantom, consumer order, consumer missing (-want +got):\n%s\nnotes: %q", diff, r.Notes)
			}
		})
	}
}

// A payment has events in flight when one is committed before an earlier one reached
// the topic; only that counts, and inside a window it counts as during faults.
func TestEventsInFlight(t *testing.T) {
	t.Parallel()
	origin := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return origin.Add(time.Duration(s * float64(time.Second))) }
	committed := []CommittedEvent{
		// p1: its capture committed at 2 s, its creation reached the topic at 5 s.
		{PaymentID: "p1", EventID: "c1", Sequence: 1, At: at(1)},
		{PaymentID: "p1", EventID: "k1", Sequence: 2, At: at(2)},
		// p2: its creation was in the topic before the capture committed.
		{PaymentID: "p2", EventID: "c2", Sequence: 1, At: at(1)},
		{PaymentID: "p2", EventID: "k2", Sequence: 2, At: at(3)},
		// p3: in flight at 12 s, outside the window.
		{PaymentID: "p3", EventID: "c3", Sequence: 1, At: at(11)},
		{PaymentID: "p3", EventID: "k3", Sequence: 2, At: at(12)},
	}
	seen := map[string]float64{"c1": 5, "k1": 6, "c2": 1.5, "k2": 3.1, "c3": 14}
	total, inFaults := eventsInFlight(committed, seen, origin, []Window{{StartS: 0, EndS: 9}})
	if total != 2 || inFaults != 1 {
		t.Errorf("in flight %d, during faults %d; want 2 and 1", total, inFaults)
	}
}
