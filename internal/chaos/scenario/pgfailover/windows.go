package pgfailover

import (
	"fmt"
	"strings"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// A window is a span of the run, in seconds from its start, in which no node
// answered as the primary.
type window struct{ StartS, EndS float64 }

// noPrimary returns the windows in which no node answered as the primary, each from
// the last tick that saw a primary to the first that saw one again, so that a window
// covers its gap whole. A window still open at the last tick ends there.
func noPrimary(ticks []tick) []window {
	var out []window
	open, lastPrimaryS := false, 0.0
	for i, t := range ticks {
		primary := t.Nodes[0].Primary || t.Nodes[1].Primary
		switch {
		case primary && open:
			out[len(out)-1].EndS = t.AtS
			open = false
		case !primary && !open:
			start := t.AtS
			if i > 0 {
				start = lastPrimaryS
			}
			out = append(out, window{StartS: start, EndS: t.AtS})
			open = true
		case !primary:
			out[len(out)-1].EndS = t.AtS
		}
		if primary {
			lastPrimaryS = t.AtS
		}
	}
	return out
}

// firstPrimary returns the first tick at or after fromS in which node i (0 or 1)
// answered as the primary.
func firstPrimary(ticks []tick, i int, fromS float64) (tick, bool) {
	for _, t := range ticks {
		if t.AtS >= fromS && t.Nodes[i].Primary {
			return t, true
		}
	}
	return tick{}, false
}

// lastPrimary returns the last tick before beforeS in which node i was the primary.
func lastPrimary(ticks []tick, i int, beforeS float64) (tick, bool) {
	var last tick
	found := false
	for _, t := range ticks {
		if t.AtS < beforeS && t.Nodes[i].Primary {
			last, found = t, true
		}
	}
	return last, found
}

// firstStandby returns the first tick at or after fromS in which node i answered as
// a standby.
func firstStandby(ticks []tick, i int, fromS float64) (tick, bool) {
	for _, t := range ticks {
		if t.AtS >= fromS && t.Nodes[i].Answered && !t.Nodes[i].Primary {
			return t, true
		}
	}
	return tick{}, false
}

// answers counts the ticks strictly between fromS and toS in which node i answered.
func answers(ticks []tick, i int, fromS, toS float64) int {
	n := 0
	for _, t := range ticks {
		if t.AtS > fromS && t.AtS < toS && t.Nodes[i].Answered {
			n++
		}
	}
	return n
}

// unavailable reports whether an attempt was refused because the API could not
// commit: a 503, another 5xx, or no answer at all. A 409 (the same key in flight from
// another client) is an answer about the key, not about the database.
func unavailable(refused string) bool {
	return refused == "transport error" || refused == "read response" || strings.HasPrefix(refused, "status 5")
}

// refusalGrace stretches each window at its end for the refusals it may still cause:
// a pool hands out a connection idle for less than a second without a ping (pgxpool's
// rule), so one broken by the failover can fail a request up to a second after the
// new primary answers; the rest is the probe's tenth of a second and the request's
// own round trip.
const refusalGrace = 2 * time.Second

// inWindow reports whether attempt a overlaps one of the windows stretched by
// refusalGrace.
func inWindow(a verdict.Attempt, windows []window) bool {
	for _, w := range windows {
		if a.SentS <= w.EndS+refusalGrace.Seconds() && a.AnsweredS >= w.StartS {
			return true
		}
	}
	return false
}

// refusals counts the attempts refused for want of a database, inside the windows and
// outside them.
func refusals(attempts []verdict.Attempt, windows []window) (inside, outside int) {
	for _, a := range attempts {
		switch {
		case !unavailable(a.Refused):
		case inWindow(a, windows):
			inside++
		default:
			outside++
		}
	}
	return inside, outside
}

// acceptedBetween counts the 201s answered in [fromS, toS).
func acceptedBetween(attempts []verdict.Attempt, fromS, toS float64) int {
	n := 0
	for _, a := range attempts {
		if a.Refused == "" && a.AnsweredS >= fromS && a.AnsweredS < toS {
			n++
		}
	}
	return n
}

// firstAcceptedAfter returns when the first 201 came of an attempt sent at or after
// fromS: an attempt sent before may have committed before, on the old primary.
func firstAcceptedAfter(attempts []verdict.Attempt, fromS float64) (float64, bool) {
	first, found := 0.0, false
	for _, a := range attempts {
		if a.Refused == "" && a.SentS >= fromS && (!found || a.AnsweredS < first) {
			first, found = a.AnsweredS, true
		}
	}
	return first, found
}

// listWindows writes windows as "8.0–10.3 s, 28.1–28.6 s".
func listWindows(windows []window) string {
	if len(windows) == 0 {
		return "none"
	}
	parts := make([]string, len(windows))
	for i, w := range windows {
		parts[i] = fmt.Sprintf("%.1f–%.1f s", w.StartS, w.EndS)
	}
	return strings.Join(parts, ", ")
}
