package clockskew

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// timestampLimitConfig is the topic config that bounds how far in the future a record's
// CreateTime may be: the broker refuses a record stamped later than now plus this
// with INVALID_TIMESTAMP (Kafka's topic configs, message.timestamp.after.max.ms).
const timestampLimitConfig = "message.timestamp.after.max.ms"

// A clockSkew is the clock-skew scenario: our relay stamps its records Skew ahead of
// now (the fault-injection knob RELAY_FAULT_TIMESTAMP_SKEW), which the broker's default
// limit tolerates; for Window the harness lowers the topic's limit below the skew, so
// that the broker refuses every record the relay sends, as it would a relay whose host
// clock ran ahead; then it removes the override, and the skew is tolerated again.
//
// The relay must take INVALID_TIMESTAMP for what it is, a refusal that says nothing
// about the record and that every record gets alike, and wait it out like an outage:
// nothing dead-lettered, everything delivered once the window ends. The skew is our
// relay's knob only: a student's relay cannot be made to skew, so its records are never
// refused and the run is invalid for it, as it says.
type clockSkew struct {
	// Skew is how far ahead of now the relay stamps its records. It must stay below
	// the broker's default limit (one hour since Kafka 4.0), which the warm-up
	// payment, published before the window, proves.
	Skew time.Duration
	// Window is how long the topic refuses the skewed records.
	Window time.Duration

	mu sync.Mutex
	// window is when the topic's limit was below the skew; EndS -1 while it is.
	window faults.Window
	// oldestAge is the highest outbox_oldest_pending_age_seconds the API reported during
	// the window, -1 when it exposes no such gauge.
	oldestAge int
}

// env is the API's environment for the scenario: the reference service's knob.
func (c *clockSkew) env() []string {
	return []string{"RELAY_FAULT_TIMESTAMP_SKEW=" + c.Skew.String()}
}

// disrupt holds the window once, reading the API's oldest pending age every half second
// meanwhile, and restores the topic's limit even when ctx ends first.
func (c *clockSkew) disrupt(ctx context.Context, rn *harness.Run) error {
	limit := c.Skew / 2
	if err := rn.SetTopicConfig(ctx, timestampLimitConfig, strconv.FormatInt(limit.Milliseconds(), 10)); err != nil {
		return err
	}
	c.mu.Lock()
	c.window = faults.Window{Kind: "timestamps_refused", StartS: time.Since(rn.Origin).Seconds(), EndS: -1}
	c.oldestAge = -1
	c.mu.Unlock()
	rn.Disrupted("topic refuses the relay's timestamps", fmt.Sprintf("%s=%d ms, below the relay's skew of %s", timestampLimitConfig, limit.Milliseconds(), c.Skew))

	end := time.Now().Add(c.Window)
	for time.Now().Before(end) {
		next := time.Now().Add(500 * time.Millisecond)
		if next.After(end) {
			next = end
		}
		if backoff.Until(ctx, next) != nil {
			break
		}
		age, ok, err := harness.ScrapeCounter(ctx, rn.API.MetricsBase()+"/metrics", "outbox_oldest_pending_age_seconds")
		if err != nil || !ok {
			continue // an API that exposes no gauge leaves the row off
		}
		c.mu.Lock()
		c.oldestAge = max(c.oldestAge, age)
		c.mu.Unlock()
	}

	// The window must close even after ctx ended, or the topic keeps refusing.
	restoreCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := rn.SetTopicConfig(restoreCtx, timestampLimitConfig, ""); err != nil {
		return err
	}
	c.mu.Lock()
	c.window.EndS = time.Since(rn.Origin).Seconds()
	c.mu.Unlock()
	rn.Disrupted("topic accepts the relay's timestamps again", timestampLimitConfig+" back to the broker's default")
	return nil
}

// validity is the row that the broker refused the relay's records, with the scenario's
// own SLO row after it (judged by its kind, like every row). The refusals are seen by
// the harness's own topic watch: payments accepted during the window whose events
// reached the topic only after it.
func (c *clockSkew) validity(r *verdict.Report, _ *harness.Run) []verdict.Check {
	c.mu.Lock()
	w, age := c.window, c.oldestAge
	c.mu.Unlock()
	held := harness.HeldBack(r.Evidence, w)
	return []verdict.Check{
		verdict.NewCheck(verdict.Validity, "events held back while the topic refused the skewed timestamps (topic)", "> 0",
			fmt.Sprintf("%d (window %.1f s to %.1f s)", held, w.StartS, w.EndS), held > 0),
		c.oldestAgeCheck(age, held),
	}
}

// oldestAgeCheck is the SLO row that an operator would have been told: the relay's
// oldest pending age, the gauge behind the OutboxOldestPendingTooOld alert
// (deploy/prometheus/alerts.yml), rose during the window to at least half its length.
// The gauge is our relay's, so the row is off for an API without it, and off when
// nothing was held back, since then there was nothing to alert on and the validity
// row already makes the run INVALID rather than the service FAIL.
func (c *clockSkew) oldestAgeCheck(age, held int) verdict.Check {
	const name = "outbox_oldest_pending_age_seconds rose during the window (reference service; alert OutboxOldestPendingTooOld)"
	want := fmt.Sprintf(">= %d", int(c.Window.Seconds()/2))
	switch {
	case age < 0:
		return verdict.OffCheck(verdict.SLO, name, want, "the API's /metrics has no outbox_oldest_pending_age_seconds (a metric of the reference service)")
	case held == 0:
		return verdict.OffCheck(verdict.SLO, name, want, fmt.Sprintf("no event held back, nothing to alert on (%d s at most)", age))
	}
	return verdict.NewCheck(verdict.SLO, name, want, fmt.Sprintf("%d s at most", age), age >= int(c.Window.Seconds()/2))
}
