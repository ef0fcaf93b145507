package load

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
)

// The lifecycle part of the load (Config.Lifecycle): right after its 201, each
// payment goes on through one of five plans, so that the relay holds several events of
// one payment whenever a fault holds back the first, and the order of the topic is
// tested by every run. Two plans race two transitions on one payment, which the API
// must settle with exactly one winner (docs/adr/0006).
//
//	n % 5 == 0  capture, refund 300, refund the rest    (4 events)
//	n % 5 == 1  capture                                  (2 events)
//	n % 5 == 2  cancel                                   (2 events)
//	n % 5 == 3  capture and cancel at once: one wins     (2 events)
//	n % 5 == 4  capture, then two refunds of 60% at once: one fits (3 events)
//
// The largest payments (Config.LargestEvery) have a plan of their own, for the
// poison scenario: capture, then refund the whole amount (3 events). That refund, with
// a 64-character user id, a 19-digit amount and a 19-digit refunded total, is the
// largest event the API can write, and the payment's last: the one to make poison,
// with nothing of its payment waiting behind it.
//
// loadtest/k6/payments.js sends the same plans.

// TransitionStats is what the clients saw of the lifecycle requests.
type TransitionStats struct {
	// Requests counts the transition requests, Committed those answered 200 (replays of
	// a retry included once), Conflicts the 409s (the losers of races), Failed those
	// that ended otherwise (another status, or out of attempts).
	Requests  int `json:"requests"`
	Committed int `json:"committed"`
	Conflicts int `json:"conflicts"`
	Failed    int `json:"failed"`
	// Races counts the races run; RacesOneWinner those that ended with exactly one
	// 200 and one 409.
	Races          int `json:"races"`
	RacesOneWinner int `json:"races_one_winner"`
	// FailReasons counts why requests failed.
	FailReasons map[string]int `json:"fail_reasons,omitempty"`
}

func (s *TransitionStats) add(o TransitionStats) {
	s.Requests += o.Requests
	s.Committed += o.Committed
	s.Conflicts += o.Conflicts
	s.Failed += o.Failed
	s.Races += o.Races
	s.RacesOneWinner += o.RacesOneWinner
	for reason, n := range o.FailReasons {
		if s.FailReasons == nil {
			s.FailReasons = map[string]int{}
		}
		s.FailReasons[reason] += n
	}
}

// A CommittedEvent is an event the API said it committed: a 201 or a 200 with its
// event id, when its request was first sent and when the answer came. The commit
// happened between the two, whatever retries came in between.
type CommittedEvent struct {
	PaymentID string
	EventID   string
	Sequence  int
	Sent      time.Time
	At        time.Time
}

// lifecycleRun is one payment's plan in progress.
type lifecycleRun struct {
	ctx       context.Context
	client    *http.Client
	cfg       Config
	paymentID string
	n         int    // the payment's number in the load
	key       string // the payment's Idempotency-Key, the prefix of its transitions'
	stats     TransitionStats
	events    []CommittedEvent
	// copies is how many clients send each transition at once (samekey.go); sameKey is
	// what they saw.
	copies  int
	sameKey SameKeyStats
	mu      sync.Mutex // guards stats, events and sameKey during a race
}

// runLifecycle sends payment n's plan and returns what it saw and committed, and what
// the copies of its transitions saw when several clients send them (samekey.go).
func runLifecycle(ctx context.Context, client *http.Client, cfg Config, n int, paymentID string) (TransitionStats, []CommittedEvent, SameKeyStats) {
	lr := &lifecycleRun{ctx: ctx, client: client, cfg: cfg, paymentID: paymentID, n: n, key: fmt.Sprintf("%s-%d", cfg.RunID, n), copies: 1}
	if sameKeyLoad(cfg, n) {
		lr.copies = SameKeyCopies
	}
	amount := int64(1000 + n) // as sendPayment sends it
	if largest(cfg, n) {
		_ = lr.send("capture", "", "c") && lr.send("refund", "", "r1")
		return lr.stats, lr.events, lr.sameKey
	}
	switch n % 5 {
	case 0:
		_ = lr.send("capture", "", "c") && lr.send("refund", `{"amount": 300}`, "r1") && lr.send("refund", "", "r2")
	case 1:
		lr.send("capture", "", "c")
	case 2:
		lr.send("cancel", "", "x")
	case 3:
		lr.race([2]transitionRequest{{"capture", "", "c"}, {"cancel", "", "x"}})
	case 4:
		if lr.send("capture", "", "c") {
			refund := fmt.Sprintf(`{"amount": %d}`, amount*6/10)
			lr.race([2]transitionRequest{{"refund", refund, "r1"}, {"refund", refund, "r2"}})
		}
	}
	return lr.stats, lr.events, lr.sameKey
}

type transitionRequest struct{ action, body, step string }

// stepNumbers number the steps of a plan, so that with replicas each step starts on
// another one, and the two requests of a race go to two replicas.
var stepNumbers = map[string]int{"c": 1, "x": 2, "r1": 3, "r2": 4}

// send makes one transition until it is answered for good and reports whether it
// committed.
func (lr *lifecycleRun) send(action, body, step string) bool {
	return lr.sendRequest(transitionRequest{action, body, step}) == http.StatusOK
}

// race sends both requests at once and counts the race.
func (lr *lifecycleRun) race(requests [2]transitionRequest) {
	var statuses [2]int
	var wg sync.WaitGroup
	for i, r := range requests {
		wg.Go(func() { statuses[i] = lr.sendRequest(r) })
	}
	wg.Wait()
	lr.mu.Lock()
	defer lr.mu.Unlock()
	lr.stats.Races++
	won := (statuses[0] == http.StatusOK) != (statuses[1] == http.StatusOK)
	lost := statuses[0] == http.StatusConflict || statuses[1] == http.StatusConflict
	if won && lost {
		lr.stats.RacesOneWinner++
	}
}

// sendRequest posts one transition with its own Idempotency-Key, from lr.copies
// clients at once, and returns the final status (0 when out of attempts). Only one
// answer counts in the stats: a 200 if a copy got one, else the first copy's.
func (lr *lifecycleRun) sendRequest(r transitionRequest) int {
	if lr.cfg.StepGap > 0 {
		_ = backoff.Until(lr.ctx, time.Now().Add(lr.cfg.StepGap)) // a cancelled load ends in try
	}
	sent := time.Now()
	answers := make([]transitionAnswer, lr.copies)
	if lr.copies == 1 {
		answers[0] = lr.try(r, 0)
	} else {
		atOnce(lr.copies, func(sender int) { answers[sender] = lr.try(r, sender) })
	}
	counted := answers[0]
	var eventIDs []string
	for _, a := range answers {
		if a.status == http.StatusOK {
			eventIDs = append(eventIDs, a.eventID)
			if counted.status != http.StatusOK {
				counted = a
			}
		}
	}
	if counted.status == http.StatusOK {
		lr.committed(counted.eventID, counted.version, sent)
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if lr.copies > 1 {
		lr.sameKey.sameKey(lr.key+"-"+r.step, eventIDs)
	}
	lr.stats.Requests++
	switch counted.status {
	case http.StatusOK:
		lr.stats.Committed++
	case http.StatusConflict:
		lr.stats.Conflicts++
	default:
		lr.stats.Failed++
		if lr.stats.FailReasons == nil {
			lr.stats.FailReasons = map[string]int{}
		}
		lr.stats.FailReasons[r.action+": "+counted.reason]++
	}
	return counted.status
}

// A transitionAnswer is the final answer of one client's transition request; eventID
// and version are from a 200's body, if it has them.
type transitionAnswer struct {
	status  int
	reason  string
	eventID string
	version int
}

// try sends one transition until it is answered for good, retrying what may be retried
// (503, 429, a 409 with Retry-After for a request in flight, a lost answer) with the
// same key. sender numbers the clients that send it at once.
func (lr *lifecycleRun) try(r transitionRequest, sender int) transitionAnswer {
	path := "/payments/" + lr.paymentID + "/" + r.action
	key := lr.key + "-" + r.step
	delay := lr.cfg.FirstBackoff
	var a transitionAnswer
	for attempt := range lr.cfg.MaxAttempts {
		// With replicas, each step, retry and copy go to the next one: a payment
		// created on one replica is captured on another, as behind a load balancer.
		url := strings.TrimRight(lr.cfg.url(lr.n+stepNumbers[r.step]+attempt+sender), "/") + path
		if attempt > 0 {
			if backoff.Until(lr.ctx, time.Now().Add(delay)) != nil {
				break
			}
			delay = min(2*delay, lr.cfg.MaxBackoff)
		}
		var body []byte
		var inFlight bool
		a.status, body, a.reason, inFlight = PostTransition(lr.ctx, lr.client, url, key, r.body)
		if a.status == http.StatusOK {
			var answer struct {
				EventID string `json:"event_id"`
				Version int    `json:"version"`
			}
			_ = json.Unmarshal(body, &answer) // the contract fixes the status, not the body
			a.eventID, a.version = answer.EventID, answer.Version
			break
		}
		if a.status != 0 && a.status < 500 && a.status != http.StatusTooManyRequests && !inFlight {
			break // 409 and the other 4xx are final answers
		}
	}
	return a
}

// committed records the event of a 200: its id, the payment's version after it, and
// when its request was first sent.
func (lr *lifecycleRun) committed(eventID string, version int, sent time.Time) {
	if eventID == "" {
		return // the contract fixes the status, not the body: no evidence, no harm
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	lr.events = append(lr.events, CommittedEvent{PaymentID: lr.paymentID, EventID: eventID, Sequence: version, Sent: sent, At: time.Now()})
}

// PostTransition makes one attempt; status 0 is a transport error, with reason.
// inFlight is a 409 with Retry-After: another request with the key is in flight.
func PostTransition(ctx context.Context, client *http.Client, url, key, body string) (status int, respBody []byte, reason string, inFlight bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, nil, "build request: " + err.Error(), false
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, "transport error", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, "read response", false
	}
	inFlight = resp.StatusCode == http.StatusConflict && resp.Header.Get("Retry-After") != ""
	return resp.StatusCode, b, fmt.Sprintf("status %d", resp.StatusCode), inFlight
}
