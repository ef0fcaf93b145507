package dlqreplay

import (
	"strings"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
)

// runEvidence is a run of one window from 10 s to 14 s, in which payment p's creation
// was dead-lettered; the harness saw it at 11 s, replayed it at 16 s (answered at
// 16.1 s), and the topic had it at 20 s. Payment p's capture was committed inside the
// window after the dead letter was seen, its refund after the replay was answered, and
// its second refund after the creation reached the topic. The harness published an
// early copy of the capture at offset 0, ahead of the relay's records of p, which start
// at offset 1. Payment q is untouched.
func runEvidence() evidence {
	origin := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return origin.Add(time.Duration(s * float64(time.Second))) }
	return evidence{
		origin: origin, cdc: true, holder: 42,
		windows: []faults.Window{{Kind: "records_refused", StartS: 10, EndS: 14}},
		log: replayLog{
			deadLetters: map[string]deadLetter{"p1": {PaymentID: "p", Sequence: 1, SeenAt: at(11)}},
			replays:     []replay{{EventID: "p1", Sent: at(16), Answered: at(16.1), Holder: 42, DuringLoad: true}},
		},
		copies: []earlyCopy{{PaymentID: "p", Sequence: 2, At: verify.RecordPosition{Partition: 0, Offset: 0}}},
		events: []load.CommittedEvent{
			{PaymentID: "p", EventID: "p1", Sequence: 1, Sent: at(10.5), At: at(10.6)},
			{PaymentID: "p", EventID: "p2", Sequence: 2, Sent: at(12), At: at(12.1)},
			{PaymentID: "p", EventID: "p3", Sequence: 3, Sent: at(17), At: at(17.1)},
			{PaymentID: "p", EventID: "p4", Sequence: 4, Sent: at(21), At: at(21.1)},
			{PaymentID: "q", EventID: "q1", Sequence: 1, Sent: at(12), At: at(12.1)},
		},
		seenS: map[string]map[int]float64{
			"p": {1: 20, 2: 20.1, 3: 20.2, 4: 21.2},
			"q": {1: 12.2},
		},
		topic: verify.TopicContents{
			EventCopies:  map[string]int{"p1": 1, "p2": 1, "p3": 1, "p4": 1, "q1": 1},
			PaymentOrder: map[string][]verify.TopicEvent{"p": {{Sequence: 1, Offset: 1}, {Sequence: 2, Offset: 2}, {Sequence: 3, Offset: 3}, {Sequence: 4, Offset: 4}}},
		},
	}
}

// check returns the row of rows whose name starts with prefix.
func check(t *testing.T, rows []verdict.Check, prefix string) verdict.Check {
	t.Helper()
	for _, c := range rows {
		if strings.HasPrefix(c.Name, prefix) {
			return c
		}
	}
	t.Fatalf("no row starting %q", prefix)
	return verdict.Check{}
}

func TestRowsOfARunThatReachedEveryWindow(t *testing.T) {
	t.Parallel()
	rows := runEvidence().rows("api", "api-2")
	for _, c := range rows {
		if !c.OK || c.Off {
			t.Errorf("%s row %q: got %s (ok %t, off %t), want it held", c.Kind, c.Name, c.Got, c.OK, c.Off)
		}
	}
	// Only p1 was committed in the window and replayed: q1 went out during it.
	if got := check(t, rows, "each refusal window").Got; got != "per window: 1" {
		t.Errorf("window row: got %q, want per window: 1", got)
	}
	// p2 and p3 were committed while p1 was dead-lettered, p3 after its replay; p4 came
	// after p1 was published.
	if got := check(t, rows, "events committed after").Got; got != "2 events of 1 payments" {
		t.Errorf("committed meanwhile: got %q, want 2 events of 1 payments", got)
	}
	if got := check(t, rows, "of them committed after").Got; got != "1 events of 1 payments" {
		t.Errorf("committed after the replay: got %q, want 1 events of 1 payments", got)
	}
}

func TestRowsThatMustFail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*evidence)
		row    string
	}{
		{"a window that dead-lettered nothing", func(e *evidence) {
			e.windows = append(e.windows, faults.Window{StartS: 30, EndS: 34})
		}, "each refusal window"},
		{"a replay while another session held the slot", func(e *evidence) {
			e.log.replays = append(e.log.replays, replay{EventID: "p1", Holder: 7, Err: "replay p1: status 404"})
		}, "replays sent through"},
		{"no event committed after the replay", func(e *evidence) {
			e.events = e.events[:2]
		}, "of them committed after"},
		{"a dead letter never delivered", func(e *evidence) {
			delete(e.topic.EventCopies, "p1")
		}, "every dead letter"},
		{"a dead letter overtaken", func(e *evidence) {
			e.topic.PaymentOrder["p"] = []verify.TopicEvent{{Sequence: 1}, {Sequence: 3}, {Sequence: 2}, {Sequence: 4}}
		}, "every dead letter"},
		{"an early copy behind its predecessor", func(e *evidence) {
			e.copies[0].At.Offset = 5
		}, "early copies"},
		{"an early copy on another partition", func(e *evidence) {
			e.copies[0].At.Partition = 2
		}, "early copies"},
		{"no replay during the load", func(e *evidence) {
			e.log.replays[0].DuringLoad = false
		}, "dead letters replayed through"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := runEvidence()
			tt.mutate(&e)
			if c := check(t, e.rows("api", "api-2"), tt.row); c.OK {
				t.Errorf("row %q: got %s, held; want it failed", c.Name, c.Got)
			}
		})
	}
}

// With the polling relay the rows about the stream are off, and the others judged.
func TestRowsOfThePollingRelay(t *testing.T) {
	t.Parallel()
	e := runEvidence()
	e.cdc, e.holder = false, 0
	rows := e.rows("api", "api-2")
	for _, prefix := range []string{"replays sent through", "of them committed after"} {
		if c := check(t, rows, prefix); !c.Off {
			t.Errorf("row %q: got %s, want off with the polling relay", c.Name, c.Got)
		}
	}
	if c := check(t, rows, "events committed after"); !c.OK || c.Off {
		t.Errorf("row %q: got %s, want it judged and held", c.Name, c.Got)
	}
}
