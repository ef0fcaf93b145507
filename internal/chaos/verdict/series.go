package verdict

// A Timeline is what the harness sampled during a run, for the charts of the HTML
// report (package timeline). It keeps totals, not rates: a sample that came late or
// not at all then loses no event, and the rate over any interval is one subtraction.
type Timeline struct {
	// IntervalS is the sampling period the harness aimed at, in seconds; the samples
	// carry their own times, which drift when a source answers slowly.
	IntervalS float64  `json:"interval_s"`
	Samples   []Sample `json:"samples"`
}

// A Sample is the run at one instant, AtS seconds from its start. Every count is a
// total since the start of the run, summed over every process of a service the harness
// restarted, so it only grows. A count is -1 until its source first answered (a
// student's service without the metric or the table never does); after that a source
// that does not answer (a frozen or killed process) keeps its last total, which is
// right: a process that is down publishes nothing.
type Sample struct {
	AtS float64 `json:"t"`
	// PaymentsCommitted counts the rows of the payments table: the payments the API
	// accepted (it answers 201 only after the commit).
	PaymentsCommitted int `json:"payments_committed"`
	// OutboxPending is a level, not a total: outbox rows waiting for the relay, -1 when
	// it could not be read at that instant (PostgreSQL restarting, no outbox_events).
	OutboxPending int `json:"outbox_pending"`
	// Published and PublishFailures are the API's own counters of publish attempts
	// (outbox_published_total, outbox_publish_failures_total); in dual-write mode the
	// failures are the handler's logged failures and nothing counts the successes.
	Published       int `json:"published"`
	PublishFailures int `json:"publish_failures"`
	// TopicRecords is the sum of the topic's end offsets: every record written, copies
	// and the harness's own records included.
	TopicRecords int `json:"topic_records"`
	// Decisions counts the consumer's decision rows. It is read before
	// PaymentsCommitted, so that payments not decided yet (their difference) is never
	// negative: a decision follows its payment's commit.
	Decisions int `json:"decisions"`
	// DuplicatesAbsorbed is sum(deliveries - 1) of the consumer's processed_events:
	// deliveries it recognised as copies and did not apply again.
	DuplicatesAbsorbed int `json:"duplicates_absorbed"`
	// DualWriteGivenUp, in dual-write mode only, counts the publishes the handler gave
	// up on, as it gave up on them: a failed publish is never retried, so each one is an
	// event lost at that instant, unless the broker wrote it before the fault dropped
	// its answer (acks lost), which only the topic can tell afterwards. -1 in every
	// other mode.
	DualWriteGivenUp int `json:"dual_write_given_up"`
}

// A Point is one value of a chart's line at a time in seconds from the start of the run.
type Point struct{ T, V float64 }

// Level returns the value of a level or total at each sample, leaving out the samples
// where it was unknown (negative).
func (tl *Timeline) Level(value func(Sample) int) []Point {
	var pts []Point
	for _, s := range tl.Samples {
		if v := value(s); v >= 0 {
			pts = append(pts, Point{T: s.AtS, V: float64(v)})
		}
	}
	return pts
}

// PerSecond turns a total into a rate: at each sample, the growth over the trailing
// window seconds divided by the time it took. A trailing window of a second or so
// smooths the jitter of a few-hundred-millisecond sampling without moving an edge (the
// end of a fault window, say) by more than that second. Samples where the total was
// unknown are left out.
func (tl *Timeline) PerSecond(total func(Sample) int, window float64) []Point {
	known := tl.Level(total)
	var pts []Point
	from := 0
	for i, p := range known {
		if i == 0 {
			continue
		}
		// Move from to the latest sample at least window seconds back, or the first.
		for from+1 < i && known[from+1].T <= p.T-window {
			from++
		}
		dt := p.T - known[from].T
		if dt <= 0 {
			continue
		}
		pts = append(pts, Point{T: p.T, V: (p.V - known[from].V) / dt})
	}
	return pts
}
