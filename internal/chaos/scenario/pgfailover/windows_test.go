package pgfailover

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// ticksOf makes one tick a second from roles, one letter per node: p primary, s
// standby, - no answer.
func ticksOf(roles ...string) []tick {
	ticks := make([]tick, len(roles))
	for i, r := range roles {
		ticks[i].AtS = float64(i)
		for n := range 2 {
			ticks[i].Nodes[n] = node{Answered: r[n] != '-', Primary: r[n] == 'p'}
		}
	}
	return ticks
}

// A window runs from the last tick that saw a primary to the first that saw one again,
// so that it covers the whole gap; one still open at the end ends at the last tick.
func TestNoPrimaryWindows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ticks []tick
		want  []window
	}{
		{"always a primary", ticksOf("ps", "ps", "-p", "sp"), nil},
		{"failover and fail-back", ticksOf("ps", "-s", "--", "-p", "sp", "s-", "p-"), []window{{0, 3}, {4, 6}}},
		{"still open", ticksOf("ps", "-s", "-s"), []window{{0, 2}}},
		{"none at the first tick", ticksOf("--", "ps"), []window{{0, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, noPrimary(tc.ticks)); diff != "" {
				t.Errorf("windows (-want +got):\n%s", diff)
			}
		})
	}
}

// Refusals for want of a database count inside a window (stretched by refusalGrace at
// its end) or outside it; a 409 and a 201 are neither.
func TestRefusalsAgainstTheWindows(t *testing.T) {
	t.Parallel()
	windows := []window{{StartS: 10, EndS: 12}}
	attempts := []verdict.Attempt{
		{SentS: 9.5, AnsweredS: 10.1, Refused: "transport error"},              // cut at the start
		{SentS: 11, AnsweredS: 11.1, Refused: "status 503 with Retry-After"},   // inside
		{SentS: 13.5, AnsweredS: 13.6, Refused: "status 503 with Retry-After"}, // within the grace
		{SentS: 20, AnsweredS: 20.1, Refused: "status 503 with Retry-After"},   // a primary answered
		{SentS: 5, AnsweredS: 5.2, Refused: "status 500"},                      // a primary answered
		{SentS: 11, AnsweredS: 11.2, Refused: "status 409"},                    // the same key in flight
		{SentS: 12.5, AnsweredS: 12.6},                                         // a 201
	}
	inside, outside := refusals(attempts, windows)
	if inside != 3 || outside != 2 {
		t.Errorf("refusals inside, outside: got %d, %d, want 3, 2", inside, outside)
	}
}

// The outage ends at the first 201 of an attempt sent after the kill: a 201 answered
// after the kill for an attempt sent before it may be a commit of the old primary.
func TestFirstAcceptedAfterTheKill(t *testing.T) {
	t.Parallel()
	attempts := []verdict.Attempt{
		{SentS: 9.9, AnsweredS: 10.01},
		{SentS: 10.5, AnsweredS: 10.6, Refused: "transport error"},
		{SentS: 14, AnsweredS: 14.2},
		{SentS: 13, AnsweredS: 13.4},
	}
	got, ok := firstAcceptedAfter(attempts, 10)
	if !ok || got != 13.4 {
		t.Errorf("first 201 after 10 s: got %v (found %t), want 13.4", got, ok)
	}
	if _, ok := firstAcceptedAfter(attempts, 15); ok {
		t.Error("first 201 after 15 s: found one, want none")
	}
}
