package timeline

import (
	"image/color"
	"strings"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// rateWindow is the trailing window of the per-second rates, in seconds (see
// verdict.Timeline.PerSecond).
const rateWindow = 1.0

// A chart is one panel of the timeline: one quantity, or two of the same unit, over
// the run's time. ID is its anchor in the page (#chart-<ID>), which the verdict rows
// link to.
type chart struct {
	ID    string
	Title string
	// Reading tells a student what to look for in it.
	Reading string
	YLabel  string
	// Count marks a chart of whole numbers (a level or a total, not a rate), whose
	// value axis is ticked at integers.
	Count bool
	Lines []line
}

// A line is one series of a chart.
type line struct {
	Name   string
	Points []verdict.Point
	Color  color.Color
}

// The colours of the lines; the faults have their own (faultColors), lighter, since
// they are areas behind the lines.
var (
	blue   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	green  = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	red    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	purple = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
	black  = color.RGBA{A: 0xff}
)

// The chart ids: the anchors the verdict rows link to.
const (
	chartPayments   = "payments"
	chartPending    = "pending"
	chartPublishes  = "publishes"
	chartTopic      = "topic"
	chartDecisions  = "decisions"
	chartUndecided  = "undecided"
	chartDuplicates = "duplicates"
	chartLost       = "lost"
)

// charts lists the panels of a run, top to bottom in the order of the story: payments
// come in, wait in the outbox, are published, land in the topic, are decided, and
// the copies are absorbed; the dual write adds what it lost.
func charts(r *verdict.Report) []chart {
	tl := r.Timeline
	if tl == nil {
		tl = &verdict.Timeline{}
	}
	cs := []chart{
		{
			ID: chartPayments, Title: "Payments accepted per second", YLabel: "payments/s",
			Lines: []line{{Name: "accepted", Color: blue, Points: tl.PerSecond(func(s verdict.Sample) int { return s.PaymentsCommitted }, rateWindow)}},
		},
		{
			ID: chartPending, Title: "Outbox: events waiting for the relay", YLabel: "events", Count: true,
			Lines: []line{{Name: "pending", Color: purple, Points: tl.Level(func(s verdict.Sample) int { return s.OutboxPending })}},
		},
		{
			ID: chartPublishes, Title: "Publish attempts per second", YLabel: "attempts/s",
			Lines: []line{
				{Name: "succeeded", Color: green, Points: tl.PerSecond(func(s verdict.Sample) int { return s.Published }, rateWindow)},
				{Name: "failed", Color: red, Points: tl.PerSecond(func(s verdict.Sample) int { return s.PublishFailures }, rateWindow)},
			},
		},
		{
			ID: chartTopic, Title: "Records written to the topic per second", YLabel: "records/s",
			Lines: []line{{Name: "records", Color: blue, Points: tl.PerSecond(func(s verdict.Sample) int { return s.TopicRecords }, rateWindow)}},
		},
		{
			ID: chartDecisions, Title: "Consumer decisions per second", YLabel: "decisions/s",
			Lines: []line{{Name: "decisions", Color: green, Points: tl.PerSecond(func(s verdict.Sample) int { return s.Decisions }, rateWindow)}},
		},
		undecidedChart(r),
		{
			ID: chartDuplicates, Title: "Duplicates absorbed by the consumer (total)", YLabel: "deliveries", Count: true,
			Lines: []line{{Name: "absorbed", Color: purple, Points: tl.Level(func(s verdict.Sample) int { return s.DuplicatesAbsorbed })}},
		},
	}
	if isDualWrite(r) {
		cs = append(cs, chart{
			ID: chartLost, Title: "Publishes the dual write gave up on (total)", YLabel: "events", Count: true,
			Lines: []line{{Name: "given up", Color: red, Points: tl.Level(func(s verdict.Sample) int { return s.DualWriteGivenUp })}},
		})
	}
	for i := range cs {
		cs[i].Reading = readingOf(r, cs[i].ID)
	}
	return cs
}

// chartOf names the chart that shows what a verdict row checks. The rows are matched
// by words of their names (verdict.Check.Name), the first rule that matches wins, so
// that a row added later links somewhere sensible without a change here.
func chartOf(c verdict.Check) string {
	name := strings.ToLower(c.Name)
	rules := []struct {
		words []string
		chart string
	}{
		// A lost payment is one never decided: the chart that shows it, for the outbox
		// and the dual write alike, is the one of payments not decided yet.
		{[]string{"lost"}, chartUndecided},
		{[]string{"drain", "pending"}, chartPending},
		{[]string{"duplicate", "copies", "redelivered", "one event id"}, chartDuplicates},
		{[]string{"accepted", "committed"}, chartPayments},
		{[]string{"sigkill", "restarted", "outage"}, chartPublishes},
		{[]string{"phantom", "dlq", "decision", "hostile"}, chartDecisions},
	}
	for _, rule := range rules {
		for _, w := range rule.words {
			if strings.Contains(name, w) {
				return rule.chart
			}
		}
	}
	// The fault rows (held back, written during, the proxy applied each fault) and
	// the contract's record rows are about what reached the topic.
	return chartTopic
}

// undecidedChart is the one chart every scenario shares, and the shortest statement of
// the course's claim: payments committed that the consumer has not decided yet. The
// outbox's line rises in a fault and comes back to zero; the dual write's stays up, by
// as many events as it lost. The harness counts the decisions before the payments (see
// verdict.Sample), so the difference is never negative.
func undecidedChart(r *verdict.Report) chart {
	var pts []verdict.Point
	if r.Timeline != nil {
		for _, s := range r.Timeline.Samples {
			if s.PaymentsCommitted >= 0 && s.Decisions >= 0 {
				pts = append(pts, verdict.Point{T: s.AtS, V: float64(s.PaymentsCommitted - s.Decisions)})
			}
		}
	}
	return chart{
		ID: chartUndecided, Title: "Payments committed, not decided yet", YLabel: "payments", Count: true,
		Lines: []line{{Name: "undecided", Color: red, Points: pts}},
	}
}
