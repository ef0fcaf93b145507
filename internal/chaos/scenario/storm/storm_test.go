package storm

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/event"
)

// stormOf is the outside of a storm whose payments each made the events given by
// type, at the version given.
func stormOf(payments map[string][]string, versions map[string]int, events map[string]map[string][]string) stormOutside {
	return stormOutside{Payments: payments, Versions: versions, Events: events}
}

func TestJudgeStormCountsKeysWithoutOneEffect(t *testing.T) {
	t.Parallel()
	created := func(ids ...string) map[string][]string { return map[string][]string{event.TypePaymentCreated: ids} }
	keys := []load.StormKey{
		{Key: "k-0", N: 0, Sequence: 1, PaymentID: "p0", IDs: []string{"p0", "p0"}},
		{Key: "k-0-c", N: 0, Sequence: 2, PaymentID: "p0", IDs: []string{"e2"}},
		{Key: "k-0-r", N: 0, Sequence: 3, PaymentID: "p0", IDs: []string{"e3", "e3", ""}},
	}
	oneEach := map[string]map[string][]string{"p0": {
		event.TypePaymentCreated: {"e1"}, event.TypePaymentCaptured: {"e2"}, event.TypePaymentRefunded: {"e3"},
	}}
	tests := []struct {
		name    string
		keys    []load.StormKey
		outside stormOutside
		want    verdict.StormOutcome
	}{
		{
			name:    "one payment, one transition and one event per key",
			keys:    keys,
			outside: stormOf(map[string][]string{load.StormUser(0): {"p0"}}, map[string]int{"p0": 3}, oneEach),
			want:    verdict.StormOutcome{Keys: 3, CreationKeys: 1},
		},
		{
			name:    "a key no client got answered may have made nothing",
			keys:    []load.StormKey{{Key: "k-1", N: 1, Sequence: 1}},
			outside: stormOf(map[string][]string{}, map[string]int{}, nil),
			want:    verdict.StormOutcome{Keys: 1, CreationKeys: 1},
		},
		{
			name:    "two payments for one key, each with its event",
			keys:    keys[:1],
			outside: stormOf(map[string][]string{load.StormUser(0): {"p0", "p9"}}, nil, map[string]map[string][]string{"p0": created("e1"), "p9": created("e9")}),
			want: verdict.StormOutcome{Keys: 1, CreationKeys: 1, TransitionsOff: true, NotOne: 1, NotOneEvent: 1,
				FirstNotOne: "key k-0: 2 payments [p0 p9]", FirstNoEvent: "key k-0: 2 PaymentCreated events"},
		},
		{
			name:    "an unanswered key that made two payments",
			keys:    []load.StormKey{{Key: "k-1", N: 1, Sequence: 1}},
			outside: stormOf(map[string][]string{load.StormUser(1): {"p1", "p2"}}, nil, map[string]map[string][]string{"p1": created("e1"), "p2": created("e2")}),
			want: verdict.StormOutcome{Keys: 1, CreationKeys: 1, TransitionsOff: true, NotOne: 1, NotOneEvent: 1,
				FirstNotOne: "key k-1: 2 payments [p1 p2]", FirstNoEvent: "key k-1: 2 PaymentCreated events"},
		},
		{
			name:    "a transition made twice: the version runs past the last key",
			keys:    keys,
			outside: stormOf(map[string][]string{load.StormUser(0): {"p0"}}, map[string]int{"p0": 4}, oneEach),
			want: verdict.StormOutcome{Keys: 3, CreationKeys: 1, NotOne: 1,
				FirstNotOne: "key k-0-r: payment p0 at version 4 after keys up to sequence 3 (answered up to 3)"},
		},
		{
			name: "a refund with two events",
			keys: keys,
			outside: stormOf(map[string][]string{load.StormUser(0): {"p0"}}, map[string]int{"p0": 3}, map[string]map[string][]string{"p0": {
				event.TypePaymentCreated: {"e1"}, event.TypePaymentCaptured: {"e2"}, event.TypePaymentRefunded: {"e3", "e4"},
			}}),
			want: verdict.StormOutcome{Keys: 3, CreationKeys: 1, NotOneEvent: 1, FirstNoEvent: "key k-0-r: 2 PaymentRefunded events"},
		},
		{
			name:    "a capture answered 200 and not committed",
			keys:    keys[:2],
			outside: stormOf(map[string][]string{load.StormUser(0): {"p0"}}, map[string]int{"p0": 1}, map[string]map[string][]string{"p0": created("e1")}),
			want: verdict.StormOutcome{Keys: 2, CreationKeys: 1, NotOne: 1, NotOneEvent: 1,
				FirstNotOne:  "key k-0-c: payment p0 at version 1 after keys up to sequence 2 (answered up to 2)",
				FirstNoEvent: "key k-0-c: 0 PaymentCaptured events"},
		},
		{
			name:    "one key answered with two payments",
			keys:    []load.StormKey{{Key: "k-0", N: 0, Sequence: 1, PaymentID: "p0", IDs: []string{"p0", "p9"}}},
			outside: stormOf(map[string][]string{load.StormUser(0): {"p0"}}, nil, map[string]map[string][]string{"p0": created("e1")}),
			want:    verdict.StormOutcome{Keys: 1, CreationKeys: 1, TransitionsOff: true, Split: 1, FirstSplit: "key k-0 answered with [p0 p9]"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, judgeStorm(tt.keys, tt.outside)); diff != "" {
				t.Errorf("judgeStorm (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStormAnswersRowFailsOnAForbiddenAnswer(t *testing.T) {
	t.Parallel()
	for _, wrong := range []int{0, 1} {
		a := load.StormAnswers{Attempts: 3, Success: 2, Wrong: wrong}
		rows := stormChecks(&verdict.StormReport{Answers: a, Outcome: verdict.StormOutcome{Keys: 1}}, nil)
		if rows[2].Name != stormAnswersRow || rows[2].OK != (wrong == 0) {
			t.Errorf("%d wrong answers: answers row = %+v, want %q passed only without them", wrong, rows[2], stormAnswersRow)
		}
	}
}

func TestStormValidityCountsOnlyKillsWithRequestsInFlight(t *testing.T) {
	t.Parallel()
	s := &idempotencyStorm{Storm: &load.Storm{Copies: 4}, Kills: 3}
	tests := []struct {
		kills    []int64
		timeouts int
		want     []bool
	}{
		{kills: []int64{5, 9, 1}, timeouts: 1, want: []bool{true, true}},
		{kills: []int64{5, 0, 1}, timeouts: 1, want: []bool{false, true}},
		{kills: []int64{5, 9}, timeouts: 0, want: []bool{false, false}},
	}
	for _, tt := range tests {
		rows := s.validityRows(tt.kills, load.StormAnswers{Timeouts: tt.timeouts}, 10)
		var got []bool
		for _, r := range rows {
			got = append(got, r.OK)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("kills %v, %d timeouts: rows pass (-want +got):\n%s", tt.kills, tt.timeouts, diff)
		}
	}
}

// stormServer answers creations, captures and refunds. Each key's very first request
// takes 500 ms, longer than any client timeout of the test, so every key times out at
// least once; a later slow request takes 150 ms. A request whose key is in flight gets
// 409 with Retry-After, and a later one the first answer again, unless split, which
// makes a new payment (event) for each.
func stormServer(t *testing.T, split bool) *httptest.Server {
	var mu sync.Mutex
	answers := map[string]string{}
	inFlight := map[string]bool{}
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		id, done := answers[key]
		busy := inFlight[key]
		if !done && !busy || split {
			inFlight[key] = true
			slow := 150 * time.Millisecond // the slow transaction of the test server
			if !seen[key] {
				seen[key], slow = true, 500*time.Millisecond
			}
			mu.Unlock()
			time.Sleep(slow)
			mu.Lock()
			inFlight[key] = false
			id = fmt.Sprintf("%s-%d", key, len(answers))
			if !done {
				answers[key] = id
			}
			answers[id] = id
			done = true
		}
		mu.Unlock()
		switch {
		case !done:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusConflict)
		case strings.HasSuffix(r.URL.Path, "/payments"):
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":"pay-%s"}`, id)
		default:
			fmt.Fprintf(w, `{"event_id":"ev-%s","version":2}`, id)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The storm's keys reach a slow server from every client at once, time out and come
// back with the same key; a server that splits keys shows in the storm's own split row.
func TestStormLoadSendsEveryKeyFromEveryClient(t *testing.T) {
	t.Parallel()
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("split=%t", split), func(t *testing.T) {
			t.Parallel()
			s := &idempotencyStorm{Storm: &load.Storm{Copies: 3, ClientTimeout: [2]time.Duration{50 * time.Millisecond, 400 * time.Millisecond},
				MaxAttempts: 20, FirstBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}}
			srv := stormServer(t, split)
			res, err := s.load(context.Background(), nil, load.Config{BaseURL: srv.URL, RunID: "t", Payments: 4, Lifecycle: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.Accepted != 4 || res.Transitions.Committed != 8 {
				t.Fatalf("accepted %d, transitions committed %d: want 4 and 8 (%v, %v)", res.Accepted, res.Transitions.Committed, res.RejectReasons, res.Transitions.FailReasons)
			}
			keys, a := s.Seen()
			if a.Success != 3*12 || a.Timeouts == 0 || a.Wrong != 0 {
				t.Errorf("answers %+v: want %d successes (every client of every key), some timeouts, nothing wrong", a, 3*12)
			}
			o := judgeStorm(keys, stormOutside{})
			if o.Keys != 12 || (o.Split > 0) != split {
				t.Errorf("keys %d, split %d: want 12 keys, split only from the splitting server (%s)", o.Keys, o.Split, o.FirstSplit)
			}
		})
	}
}
