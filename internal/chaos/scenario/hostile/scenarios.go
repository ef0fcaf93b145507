package hostile

import (
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
)

// Scenario is the hostile-records scenario: the harness writes records that break the
// contract to the topic itself, as another producer would, and copies of decided events.
func Scenario(bool) harness.Scenario {
	hostile := &hostileRecords{Foreign: &verify.ForeignRecords{}, For: 13 * time.Second, Every: 500 * time.Millisecond}
	return harness.Scenario{
		Name: "hostile-records",
		Description: "while a load paced over 15 s arrives, the harness writes to the topic itself, as another producer, one record every " + hostile.Every.String() +
			": records that break the contract in turn (wrong JSON types, not JSON, NUL in user_id or currency, invalid UTF-8, a 256 KiB header, no headers, a key that is not the payment id) and, every third, a copy of an already decided event with another payload; " +
			"the consumer must dead-letter each hostile record, count each copy as a duplicate (the first processed wins), decide every real payment once, and never stop",
		Span:      15 * time.Second,
		LoadDelay: -time.Second, // the load starts first, so that decided events exist to copy
		Disrupt:   hostile.disrupt,
		Validity:  hostile.validity,
		Foreign:   hostile.Foreign,
	}
}
