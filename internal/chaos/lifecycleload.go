package chaos

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
)

// The lifecycle part of the load (LoadConfig.Lifecycle): right after its 201, each
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
// The largest payments (LoadConfig.LargestEvery) have a plan of their own, for the
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
// event id, and when the answer came.
type CommittedEvent struct {
	PaymentID string
	EventID   string
	Sequence  int
	At        time.Time
}

// lifecycleRun is one payment's plan in progress.
type lifecycleRun struct {
	ctx       context.Context
	client    *http.Client
	cfg       LoadConfig
	paymentID string
	n         int    // the payment's number in the load
	key       string // the payment's Idempotency-Key, the prefix of its transitions'
	stats     TransitionStats
	events    []CommittedEvent
	mu        sync.Mutex // guards stats and events during a race
}

// runLifecycle sends payment n's plan and returns what it saw and committed.
func runLifecycle(ctx context.Context, client *http.Client, cfg LoadConfig, n int, paymentID string) (TransitionStats, []CommittedEvent) {
	lr := &lifecycleRun{ctx: ctx, client: client, cfg: cfg, paymentID: paymentID, n: n, key: fmt.Sprintf("%s-%d", cfg.RunID, n)}
	amount := int64(1000 + n) // as sendPayment sends it
	if largest(cfg, n) {
		_ = lr.send("capture", "", "c") && lr.send("refund", "", "r1")
		return lr.stats, lr.events
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
	return lr.stats, lr.events
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

// sendRequest posts one transition with its own Idempotency-Key, retrying what may be
// retried (503, 429, a lost answer) with the same key, and returns the final status (0
// when out of attempts).
func (lr *lifecycleRun) sendRequest(r transitionRequest) int {
	path := "/payments/" + lr.paymentID + "/" + r.action
	key := lr.key + "-" + r.step
	backoff := lr.cfg.FirstBackoff
	status, reason := 0, ""
	for attempt := range lr.cfg.MaxAttempts {
		// With replicas, each step and each retry go to the next one: a payment created
		// on one replica is captured on another, as behind a load balancer.
		url := strings.TrimRight(lr.cfg.url(lr.n+stepNumbers[r.step]+attempt), "/") + path
		if attempt > 0 {
			if waitUntil(lr.ctx, time.Now().Add(backoff)) != nil {
				break
			}
			backoff = min(2*backoff, lr.cfg.MaxBackoff)
		}
		var body []byte
		status, body, reason = postTransition(lr.ctx, lr.client, url, key, r.body)
		if status == http.StatusOK {
			lr.committed(body)
			break
		}
		if status != 0 && status < 500 && status != http.StatusTooManyRequests {
			break // 409 and the other 4xx are final answers
		}
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	lr.stats.Requests++
	switch status {
	case http.StatusOK:
		lr.stats.Committed++
	case http.StatusConflict:
		lr.stats.Conflicts++
	default:
		lr.stats.Failed++
		if lr.stats.FailReasons == nil {
			lr.stats.FailReasons = map[string]int{}
		}
		lr.stats.FailReasons[r.action+": "+reason]++
	}
	return status
}

// committed records the event of a 200: its id and the payment's version after it.
func (lr *lifecycleRun) committed(body []byte) {
	var answer struct {
		EventID string `json:"event_id"`
		Version int    `json:"version"`
	}
	if json.Unmarshal(body, &answer) != nil || answer.EventID == "" {
		return // the contract fixes the status, not the body: no evidence, no harm
	}
	lr.mu.Lock()
	defer lr.mu.Unlock()
	lr.events = append(lr.events, CommittedEvent{PaymentID: lr.paymentID, EventID: answer.EventID, Sequence: answer.Version, At: time.Now()})
}

// postTransition makes one attempt; status 0 is a transport error, with reason.
func postTransition(ctx context.Context, client *http.Client, url, key, body string) (status int, respBody []byte, reason string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, nil, "build request: " + err.Error()
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, "transport error"
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, "read response"
	}
	return resp.StatusCode, b, fmt.Sprintf("status %d", resp.StatusCode)
}
