package harness

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/event"
)

// Each kind of broken lifecycle fails its own count, and a correct one fails none.
func TestFillOrder(t *testing.T) {
	t.Parallel()
	ev := func(typ string, seq int) verify.TopicEvent {
		return verify.TopicEvent{EventID: fmt.Sprintf("%s-%d", typ, seq), Type: typ, Sequence: seq}
	}
	created, captured := ev(event.TypePaymentCreated, 1), ev(event.TypePaymentCaptured, 2)
	refund3, refund4 := ev(event.TypePaymentRefunded, 3), ev(event.TypePaymentRefunded, 4)
	cancelled := ev(event.TypePaymentCancelled, 2)
	tests := []struct {
		name                      string
		order                     []verify.TopicEvent
		committed                 verify.CommittedLifecycle
		consumer                  []int
		wantOrder, wantLost       int
		wantPhantom, wantConsumer int
		wantMissing               int
	}{
		{name: "in order", order: []verify.TopicEvent{created, captured, refund3, refund4}, committed: verify.CommittedLifecycle{Status: "refunded", Version: 4}, consumer: []int{1, 2, 3, 4}},
		{name: "cancelled", order: []verify.TopicEvent{created, cancelled}, committed: verify.CommittedLifecycle{Status: "cancelled", Version: 2}, consumer: []int{1, 2}},
		{name: "capture before creation", order: []verify.TopicEvent{captured, created}, committed: verify.CommittedLifecycle{Status: "captured", Version: 2}, consumer: []int{1, 2}, wantOrder: 1},
		{name: "refunds swapped", order: []verify.TopicEvent{created, captured, refund4, refund3}, committed: verify.CommittedLifecycle{Status: "refunded", Version: 4}, consumer: []int{1, 2, 3, 4}, wantOrder: 1},
		{name: "committed refund without event", order: []verify.TopicEvent{created, captured}, committed: verify.CommittedLifecycle{Status: "partially_refunded", Version: 3}, consumer: []int{1, 2}, wantLost: 1, wantMissing: 1},
		{name: "event of an uncommitted transition", order: []verify.TopicEvent{created, captured, refund3}, committed: verify.CommittedLifecycle{Status: "captured", Version: 2}, consumer: []int{1, 2}, wantPhantom: 1},
		{name: "capture in the topic, cancel committed", order: []verify.TopicEvent{created, captured}, committed: verify.CommittedLifecycle{Status: "cancelled", Version: 2}, consumer: []int{1, 2}, wantPhantom: 1, wantLost: 0},
		{name: "consumer took them out of order", order: []verify.TopicEvent{created, captured}, committed: verify.CommittedLifecycle{Status: "captured", Version: 2}, consumer: []int{2, 1}, wantConsumer: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obs := verify.Observed{Committed: committed("p1"), Topic: verify.NewTopicContents(), Decisions: map[string]int{"p1": 1},
				Lifecycles: map[string]verify.CommittedLifecycle{"p1": tt.committed}, ConsumerOrder: map[string][]int{"p1": tt.consumer}, ConsumerOwnViolations: 0}
			obs.Topic.PaymentOrder["p1"] = tt.order
			obs.Topic.TransitionEventIDs["p1"] = map[int][]string{}
			for _, e := range tt.order {
				obs.Topic.TransitionEventIDs["p1"][e.Sequence] = append(obs.Topic.TransitionEventIDs["p1"][e.Sequence], e.EventID)
			}
			var r verdict.Report
			fillObserved(obs, &r)
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
	committed := []load.CommittedEvent{
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
	total, inFaults := eventsInFlight(committed, seen, origin, []faults.Window{{StartS: 0, EndS: 9}})
	if total != 2 || inFaults != 1 {
		t.Errorf("in flight %d, during faults %d; want 2 and 1", total, inFaults)
	}
}
