package dlqreplay

import (
	"fmt"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/deadletter"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
)

// Scenario is the dlq-replay scenario: the topic refuses every record for a few
// windows, the relay dead-letters what it sends meanwhile, and the harness replays the
// dead letters through the second API replica while their payments keep getting
// events.
func Scenario(short bool) harness.Scenario {
	d := &dlqReplay{
		Windows: 4, Window: 4 * time.Second, FirstWindow: 4 * time.Second, Every: 10 * time.Second,
		StepGap: 2 * time.Second, ReplayEvery: time.Second, Settle: 2 * time.Minute,
		admin: deadletter.NewAdmin(), foreign: &verify.ForeignRecords{}, windowsDone: make(chan struct{}),
	}
	span := 40 * time.Second
	if short {
		d.Windows, span = 2, 20*time.Second
	}
	return harness.Scenario{
		Name: "dlq-replay",
		Description: fmt.Sprintf("two API processes (two relays) share one outbox; %d times for %s the topic's %s is below every record, which the broker refuses as too large, and the relay, with RELAY_MAX_REJECTIONS=1, dead-letters every event it sends meanwhile; "+
			"between the windows the harness replays each dead letter through the second replica's POST /admin/dlq/{event_id}/replay, while the load, paced over %s, takes the same payments on through their lifecycle one step every %s; "+
			"each payment's events must reach the topic and the consumer in their sequence, every dead letter under its own event id, with the users' totals right; "+
			"with the CDC relay the first replica streams from the replication slot and the second only waits, so a replay reaches the streaming relay at its next look and an event committed meanwhile must not overtake it",
			d.Windows, d.Window, sizeLimitConfig, span, d.StepGap),
		Replicas:   2,
		Span:       span,
		APIEnv:     append(d.admin.Env(), "RELAY_MAX_REJECTIONS=1"),
		BeforeLoad: d.arrangeStream,
		Load:       d.sendLoad,
		Disrupt:    d.disrupt,
		AfterLoad:  d.settle,
		Validity:   d.validity,
		Foreign:    d.foreign,
	}
}
