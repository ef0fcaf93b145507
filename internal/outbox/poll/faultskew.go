package poll

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// skewTimestamps applies the FaultTimestampSkew fault injection (Config): it moves
// the timestamp of records about to be produced by skew, or leaves them alone when skew
// is 0, as it is outside the clock-skew chaos scenario. Every record the relay produces
// is built just before its attempt (kafkaRecord), so none is skewed twice.
func skewTimestamps(records []*kgo.Record, skew time.Duration) {
	if skew == 0 {
		return
	}
	for _, r := range records {
		r.Timestamp = r.Timestamp.Add(skew)
	}
}
