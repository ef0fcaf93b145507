package poison

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/deadletter"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/event"
)

// The poison scenario's limit is measured, not computed: before the fault, a
// calibration load sends every plan the load will send, the largest payments' included,
// and the harness reads back from the topic how large each record was on the wire, as
// the broker measures it against max.message.bytes. The limit then goes half way
// between the largest record that must flow, of any event type, and the smallest
// poison record.
//
// Measured because the sizes are the relay's business: its envelope headers, its
// compression (snappy by default, per batch), and timestamps whose trailing zeros
// RFC 3339 drops. A limit computed from one warm-up creation would be wrong for the
// lifecycle's refunds, 80-odd bytes larger than a creation.

// calibrationPayments is the calibration load: every lifecycle plan twice
// (load/lifecycleload.go) and two largest payments (calibrationLargestEvery).
const (
	calibrationPayments     = 12
	calibrationLargestEvery = 6
)

// minPoisonGap is the least gap between the largest record that must flow and the
// smallest poison record for the limit to mean anything: half of it on each side of
// the limit, against the few bytes by which records of one kind differ (a timestamp's
// dropped zeros, a random id that compresses a little).
const minPoisonGap = 32

// A calibration is what the calibration load measured and the limit it gives.
type calibration struct {
	// Payments counts the calibration's payments, all committed; paymentIDs are
	// theirs, which the poison tally leaves out.
	Payments   int
	paymentIDs []string
	// PoisonType is the event type of the poison records: the largest payments'
	// refund with the lifecycle load, their creation without it; types are the event
	// types the load writes, each of which must have been measured.
	PoisonType string
	types      []string
	// Largest is the largest record of each event type that must flow; Poison the
	// smallest poison record, of PoisonSamples.
	Largest       map[string]int
	Poison        int
	PoisonSamples int
	// Shared counts the records that shared a batch with another, and so were not
	// measured alone.
	Shared int
	// Limit is the max.message.bytes the fault sets.
	Limit int
}

// largestNormal returns the largest record that must flow and its type.
func (c calibration) largestNormal() (typ string, bytes int) {
	for _, t := range slices.Sorted(maps.Keys(c.Largest)) {
		if c.Largest[t] > bytes {
			typ, bytes = t, c.Largest[t]
		}
	}
	return typ, bytes
}

// problem says why the calibration cannot place a limit that only the poison records
// exceed, or "" when it can: an event type of the load never measured alone, no
// poison record measured, or a gap too small for the noise.
func (c calibration) problem(types []string) string {
	var missing []string
	for _, t := range types {
		if _, ok := c.Largest[t]; !ok {
			missing = append(missing, t)
		}
	}
	_, normal := c.largestNormal()
	switch {
	case len(missing) > 0:
		return "no " + strings.Join(missing, ", ") + " record measured alone in its batch"
	case c.PoisonSamples == 0:
		return "no poison record measured alone in its batch"
	case c.Poison-normal < minPoisonGap:
		return fmt.Sprintf("the smallest poison record is only %d bytes above the largest other", c.Poison-normal)
	}
	return ""
}

// summary is the calibration as the report's rows show it.
func (c calibration) summary() string {
	typ, normal := c.largestNormal()
	var each []string
	for _, t := range slices.Sorted(maps.Keys(c.Largest)) {
		each = append(each, fmt.Sprintf("%s %d", strings.TrimPrefix(t, "Payment"), c.Largest[t]))
	}
	return fmt.Sprintf("%s=%d: largest other record %d bytes (%s; by type %s), smallest poison %d bytes (%s, %d measured); %d of the calibration's records shared a batch",
		messageSizeLimitConfig, c.Limit, normal, typ, strings.Join(each, ", "), c.Poison, c.PoisonType, c.PoisonSamples, c.Shared)
}

// measureCalibration places the limit from the sizes: half way between the largest
// record that must flow and the smallest poison record.
func measureCalibration(sizes []deadletter.RecordSize, shared int, poisonType string) calibration {
	c := calibration{PoisonType: poisonType, Largest: map[string]int{}, Shared: shared}
	for _, s := range sizes {
		if s.Large && s.Type == poisonType {
			if c.PoisonSamples == 0 || s.Bytes < c.Poison {
				c.Poison = s.Bytes
			}
			c.PoisonSamples++
			continue
		}
		c.Largest[s.Type] = max(c.Largest[s.Type], s.Bytes)
	}
	_, normal := c.largestNormal()
	c.Limit = normal + (c.Poison-normal)/2
	return c
}

// calibrate sends the calibration load, before any fault, waits until it is in the
// topic and measures it. It returns how many payments it committed, which the run
// counts with the warm-up.
func (p *poison) calibrate(ctx context.Context, rn *harness.Run, verifier *verify.Verifier, report *verdict.Report) (int, error) {
	// Paced, so that most events are published alone and so measured alone.
	load, err := load.Run(ctx, load.Config{BaseURL: rn.API.BaseURL, RunID: report.RunID + "-calibration", APIKey: rn.APIKey, Payments: calibrationPayments,
		Span: calibrationPayments * 500 * time.Millisecond, LargestEvery: calibrationLargestEvery, Lifecycle: report.LifecycleLoad})
	if err != nil {
		return load.Accepted, fmt.Errorf("calibration load: %w", err)
	}
	if load.Accepted != calibrationPayments || load.Transitions.Failed > 0 {
		return load.Accepted, fmt.Errorf("calibration load: %d of %d payments accepted, %d transitions failed (%v %v)",
			load.Accepted, calibrationPayments, load.Transitions.Failed, load.RejectReasons, load.Transitions.FailReasons)
	}
	if _, err := verifier.WaitDrain(ctx, time.Now()); err != nil {
		return load.Accepted, fmt.Errorf("calibration load not published: %w", err)
	}
	sizes, shared, err := deadletter.RecordSizes(ctx, rn.Brokers, rn.Topic)
	if err != nil {
		return load.Accepted, err
	}
	poisonType := event.TypePaymentCreated
	if report.LifecycleLoad {
		poisonType = event.TypePaymentRefunded
	}
	c := measureCalibration(sizes, shared, poisonType)
	c.Payments, c.paymentIDs, c.types = load.Accepted, load.PaymentIDs, loadEventTypes(report.LifecycleLoad)
	p.mu.Lock()
	p.calibration = c
	p.mu.Unlock()
	rn.Logger.Info("poison limit calibrated", "summary", c.summary())
	return load.Accepted, nil
}

// loadEventTypes are the event types the load writes that the calibration must have
// measured.
func loadEventTypes(lifecycle bool) []string {
	if !lifecycle {
		return []string{event.TypePaymentCreated}
	}
	return []string{event.TypePaymentCreated, event.TypePaymentCaptured, event.TypePaymentRefunded, event.TypePaymentCancelled}
}

// overLimit returns the records that the calibration did not call poison but that,
// measured alone on the wire, are larger than its limit, each event once. The same
// event compresses to the same bytes on every send, but two events of one type do
// not: snappy's output for records of one shape can vary by up to 90 bytes (a record
// may go out uncompressed), more than the gap the limit sits in. The broker refuses
// such a record alone, so dead-lettering it is right; the harness's limit, not the
// service, was wrong for it.
func (c calibration) overLimit(sizes []deadletter.RecordSize) []deadletter.RecordSize {
	var over []deadletter.RecordSize
	seen := map[string]bool{}
	for _, s := range sizes {
		if (s.Large && s.Type == c.PoisonType) || s.Bytes <= c.Limit || seen[s.EventID] {
			continue
		}
		seen[s.EventID] = true
		over = append(over, s)
	}
	return over
}
