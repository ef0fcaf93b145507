package poison

import (
	"slices"
	"strings"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/deadletter"
	"github.com/dscourse/payments-outbox/internal/event"
)

func TestCalibrationPutsTheLimitBetweenEveryOtherRecordAndThePoison(t *testing.T) {
	t.Parallel()
	sizes := []deadletter.RecordSize{
		{Type: event.TypePaymentCreated, Bytes: 330},
		{Type: event.TypePaymentCaptured, Bytes: 345},
		{Type: event.TypePaymentRefunded, Bytes: 410}, // an innocent refund: the largest that must flow
		{Type: event.TypePaymentRefunded, Bytes: 402},
		{Type: event.TypePaymentCancelled, Bytes: 346},
		// The largest payments' creation and capture are not poison, and must flow too.
		{Type: event.TypePaymentCreated, Large: true, Bytes: 395},
		{Type: event.TypePaymentCaptured, Large: true, Bytes: 405},
		{Type: event.TypePaymentRefunded, Large: true, Bytes: 494},
		{Type: event.TypePaymentRefunded, Large: true, Bytes: 490},
	}
	c := measureCalibration(sizes, 3, event.TypePaymentRefunded)
	if typ, normal := c.largestNormal(); typ != event.TypePaymentRefunded || normal != 410 {
		t.Errorf("largest other record = %s %d, want %s 410", typ, normal, event.TypePaymentRefunded)
	}
	if c.Poison != 490 || c.PoisonSamples != 2 {
		t.Errorf("smallest poison = %d of %d, want 490 of 2", c.Poison, c.PoisonSamples)
	}
	if c.Limit != 450 {
		t.Errorf("limit = %d, want 450, half way between 410 and 490", c.Limit)
	}
	if p := c.problem(loadEventTypes(true)); p != "" {
		t.Errorf("problem = %q, want none", p)
	}
}

func TestCalibrationRefusesWhatCannotPlaceALimit(t *testing.T) {
	t.Parallel()
	every := []deadletter.RecordSize{
		{Type: event.TypePaymentCreated, Bytes: 330},
		{Type: event.TypePaymentCaptured, Bytes: 345},
		{Type: event.TypePaymentRefunded, Bytes: 410},
		{Type: event.TypePaymentCancelled, Bytes: 346},
	}
	tests := []struct {
		name  string
		sizes []deadletter.RecordSize
		want  string
	}{
		{"an event type never measured alone", append(every[1:], deadletter.RecordSize{Type: event.TypePaymentRefunded, Large: true, Bytes: 490}), "no PaymentCreated record"},
		{"no poison record", every, "no poison record"},
		{"poison too close to an innocent refund", append(every, deadletter.RecordSize{Type: event.TypePaymentRefunded, Large: true, Bytes: 430}), "only 20 bytes above"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := measureCalibration(tt.sizes, 0, event.TypePaymentRefunded)
			if got := c.problem(loadEventTypes(true)); !strings.Contains(got, tt.want) {
				t.Errorf("problem = %q, want it to say %q", got, tt.want)
			}
		})
	}
}

// A record the calibration called innocent can still be larger than the limit on the
// wire (its compression came out worse than its type's usual): the run must say the
// harness's limit refused it, so that the service is not blamed for dead-lettering it.
func TestOverLimitFindsInnocentRecordsLargerThanTheLimit(t *testing.T) {
	t.Parallel()
	c := calibration{PoisonType: event.TypePaymentRefunded, Limit: 421}
	sizes := []deadletter.RecordSize{
		{EventID: "poison", Type: event.TypePaymentRefunded, Large: true, Bytes: 442},
		{EventID: "small refund", Type: event.TypePaymentRefunded, Bytes: 380},
		{EventID: "at the limit", Type: event.TypePaymentCaptured, Large: true, Bytes: 421},
		{EventID: "large creation", Type: event.TypePaymentCreated, Large: true, Bytes: 463},
		{EventID: "large creation", Type: event.TypePaymentCreated, Large: true, Bytes: 463}, // a copy
		{EventID: "uncompressed refund", Type: event.TypePaymentRefunded, Bytes: 425},
	}
	var got []string
	for _, s := range c.overLimit(sizes) {
		got = append(got, s.EventID)
	}
	if want := []string{"large creation", "uncompressed refund"}; !slices.Equal(got, want) {
		t.Errorf("over the limit: %q, want %q", got, want)
	}
}
