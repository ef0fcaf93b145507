package verify

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
	"github.com/dscourse/payments-outbox/internal/testenv"
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
	c := NewTopicContents()
	createdRecord := testenv.PaymentRecord(t, "payments.events", p, created)
	c.Add(createdRecord)
	c.Add(transitionRecord(t, event.TypePaymentCaptured, p, captured, 2, 1))
	c.Add(testenv.PaymentRecord(t, "payments.events", p, created)) // a late copy
	c.Add(transitionRecord(t, event.TypePaymentRefunded, p, refunded, 3, 3))
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
