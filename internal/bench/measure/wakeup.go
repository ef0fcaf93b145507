package measure

// What wakes our relay's workers during the latency measurement, and how long after the
// commit: read from the relay's own metrics, outbox_claims_total and
// outbox_commit_to_claim_seconds by woken_by, on the registry the benchmark gave it.

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// WakeFigures are, for each wake-up source, the claims that found events and how long
// those events had waited for their claim.
type WakeFigures map[string]WakeFigure

type WakeFigure struct {
	claims     float64
	events     float64
	meanWaitMs float64 // mean time from creation (just before the commit) to claim
	// Share and claimsShare are of all claimed events and of all claims that found
	// events; since fills them in.
	Share, claimsShare float64
}

// gatherWakeups reads the wake-up metrics from reg.
func gatherWakeups(reg prometheus.Gatherer) (WakeFigures, error) {
	families, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather relay metrics: %w", err)
	}
	figures := WakeFigures{}
	for _, family := range families {
		for _, m := range family.GetMetric() {
			var source string
			for _, label := range m.GetLabel() {
				if label.GetName() == "woken_by" {
					source = label.GetValue()
				}
			}
			f := figures[source]
			switch family.GetName() {
			case "outbox_claims_total":
				f.claims = m.GetCounter().GetValue()
			case "outbox_commit_to_claim_seconds":
				h := m.GetHistogram()
				f.events = float64(h.GetSampleCount())
				if f.events > 0 {
					f.meanWaitMs = h.GetSampleSum() / f.events * 1000
				}
			default:
				continue
			}
			figures[source] = f
		}
	}
	return figures, nil
}

// since is w minus the figures earlier read from the same relay: what happened in
// between. The shares and means are recomputed from the differences.
func (w WakeFigures) since(earlier WakeFigures) WakeFigures {
	diff := WakeFigures{}
	var claims, events float64
	for source, f := range w {
		e := earlier[source]
		d := WakeFigure{claims: f.claims - e.claims, events: f.events - e.events}
		if d.events > 0 {
			d.meanWaitMs = (f.meanWaitMs*f.events - e.meanWaitMs*e.events) / d.events
		}
		claims, events = claims+d.claims, events+d.events
		diff[source] = d
	}
	for source, d := range diff {
		if events > 0 {
			d.Share = d.events / events
		}
		if claims > 0 {
			d.claimsShare = d.claims / claims
		}
		diff[source] = d
	}
	return diff
}

// Print writes one line: each source that claimed events, by share of events.
func (w WakeFigures) Print(out io.Writer) {
	sources := make([]string, 0, len(w))
	for source, f := range w {
		if f.events > 0 {
			sources = append(sources, source)
		}
	}
	slices.SortFunc(sources, func(a, b string) int { return int(w[b].events - w[a].events) })
	parts := make([]string, len(sources))
	for i, source := range sources {
		f := w[source]
		parts[i] = fmt.Sprintf("%s %.0f%% of events (%.0f%% of claims, %.1f ms after commit on average)",
			source, 100*f.Share, 100*f.claimsShare, f.meanWaitMs)
	}
	fmt.Fprintf(out, "  %-28s %s\n", "woken by, our relay", strings.Join(parts, "; "))
}

// MeanWaitMs is the mean commit-to-claim time over every claimed event.
func (w WakeFigures) MeanWaitMs() float64 {
	var sum, events float64
	for _, f := range w {
		sum += f.meanWaitMs * f.events
		events += f.events
	}
	if events == 0 {
		return 0
	}
	return sum / events
}
