package delivery

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
)

// IsRejection reports whether err means the broker refused this record for a reason
// of its own, so that sending the same bytes again cannot succeed. Only these count
// towards the DLQ, in both relays; anything else is a transport failure.
//
// franz-go reports a record too large for its own batch limit, and the broker's
// MESSAGE_TOO_LARGE, both as kerr.MessageTooLarge.
//
// Two record-level codes are left out on purpose, because they are about what the
// relay put around the event, not the event: INVALID_TIMESTAMP judges the record
// timestamp, which is this host's time.Now(), so a host whose clock is off past the
// broker's log.message.timestamp.*.max.ms gets it for every record; CORRUPT_MESSAGE
// means the CRC the client computed does not match the bytes the broker received (a
// client or network fault), and a resend rebuilds both. Counted as rejections, either
// would dead-letter the whole backlog in seconds; as transport failures they pause the
// relay, and the oldest pending age alerts, as in an outage (docs/adr/0005).
func IsRejection(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) ||
		errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord)
}
