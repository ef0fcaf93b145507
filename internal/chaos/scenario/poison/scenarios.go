package poison

import (
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
)

// Scenario is the poison scenario: the topic's size limit below the largest valid
// events, which must reach the DLQ with an alert each, then be replayed.
func Scenario(bool) harness.Scenario {
	// One payment in twenty is poison: 5 in a run of 100, 1 in the short run of 20.
	poisoned := &poison{Every: 20, MaxRejections: 5, Wait: 2 * time.Minute}
	return harness.Scenario{
		Name: "poison",
		Description: "while a load paced over 20 s arrives, the topic's " + messageSizeLimitConfig + ", measured by a calibration load before the fault, is below the size of the largest valid event, the full refund of a largest payment (one in " + fmt.Sprint(poisoned.Every) +
			" has a 64-character user id and a 19-digit amount, the only fields that can make a payment larger), and above every other record of every event type; those refunds must reach the DLQ after at most " + fmt.Sprint(poisoned.MaxRejections) +
			" rejections, each with an alert at the harness's webhook, while every other event flows; then the limit is restored and the harness replays each dead letter through the admin endpoint, which must deliver it with its original event id",
		Span:         20 * time.Second,
		LargestEvery: poisoned.Every,
		LoadDelay:    time.Second, // the limit is down before the first payment
		Prepare:      poisoned.prepare,
		BeforeLoad:   poisoned.calibrate,
		Disrupt:      poisoned.disrupt,
		AfterLoad:    poisoned.afterLoad,
		Validity:     poisoned.validity,
	}
}
