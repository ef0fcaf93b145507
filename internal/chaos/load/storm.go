package load

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
)

// The load of the idempotency-storm scenario. Every key is sent by several clients at
// once, released by a barrier (atOnce): the creation of a payment, then its capture and
// its full refund, each with a key of its own. Each client gives every attempt less time
// than the API's 5 s transaction budget, and retries with the same key after a timeout,
// a connection error (the API SIGKILLed under it, or down), a 409 in flight or a 503,
// as a real client does: that is how one key comes to be in flight several times at
// once. The clients wait what Retry-After says, and back off otherwise.

// A Storm is the load of the idempotency-storm scenario: every key sent by Copies
// clients at once, each attempt timed out by its client after ClientTimeout and retried
// with the same key. Run sends it; InFlight and Seen say what its clients are doing and
// saw, for the scenario's kills and rows.
type Storm struct {
	// Copies is how many clients send each key at once.
	Copies int
	// ClientTimeout is the random range of one attempt's timeout, every value of it
	// below the API's 5 s transaction budget.
	ClientTimeout [2]time.Duration
	// MaxAttempts bounds one client's attempts at one key; FirstBackoff doubles up to
	// MaxBackoff between them when the answer says no Retry-After.
	MaxAttempts              int
	FirstBackoff, MaxBackoff time.Duration

	// inFlight counts the attempts sent and not yet answered (nor timed out).
	inFlight atomic.Int64

	mu sync.Mutex
	// keys is what the clients saw of every key, in the order they ended.
	keys    []StormKey
	answers StormAnswers
}

// InFlight is how many attempts are sent and not yet answered (nor timed out).
func (s *Storm) InFlight() int64 { return s.inFlight.Load() }

// Seen returns what the clients saw of every key, in the order they ended, and the
// answers of every attempt.
func (s *Storm) Seen() ([]StormKey, StormAnswers) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]StormKey(nil), s.keys...), s.answers
}

// reset forgets an earlier run's keys and answers.
func (s *Storm) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys, s.answers = nil, StormAnswers{}
}

func (s *Storm) recordKey(k StormKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, k)
}

func (s *Storm) recordAnswer(path string, at stormAttempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers.record("POST", path, at)
}

// stormPlan is each payment's transitions after its creation, in order, with the
// sequence each one's event must carry (the creation's is 1).
var stormPlan = []struct {
	action, step string
	sequence     int
}{
	{"capture", "c", 2},
	{"refund", "r", 3},
}

// StormUser is the user id of the storm's payment n: one user per key, so that the
// payments table and the topic say, without the service's help, which payments a key
// made.
func StormUser(n int) string { return fmt.Sprintf("chaos-storm-%d", n) }

// A StormKey is what the clients saw of one key.
type StormKey struct {
	Key string
	// N is the payment's number in the load; Sequence the event's sequence the key
	// must make (1 for the creation).
	N, Sequence int
	// PaymentID is the payment the key is about: for a creation the first 201's.
	PaymentID string
	// IDs are the ids the successful answers named, one per answer: payment ids of
	// 201s, event ids of 200s (empty when a 200 has none).
	IDs []string
}

// Succeeded reports whether some client got a 201 (200).
func (k StormKey) Succeeded() bool { return len(k.IDs) > 0 }

// StormAnswers counts the answers of every attempt, first attempts and retries, by
// what the contract allows a storm to get: 201 (200 for a transition), 409 with
// Retry-After (another request with the key in flight), 422, 503 with Retry-After.
// Anything else is wrong; timeouts and connection errors are the storm itself.
type StormAnswers struct {
	Attempts int `json:"attempts"`
	Success  int `json:"success"`
	InFlight int `json:"in_flight_409"`
	Invalid  int `json:"unprocessable_422"`
	Busy     int `json:"unavailable_503"`
	// Wrong counts the other answers (a 409 or 503 without Retry-After, a 500, a 404
	// ...); FirstWrong lists the first few as "status METHOD endpoint".
	Wrong      int      `json:"wrong"`
	FirstWrong []string `json:"first_wrong,omitempty"`
	// Timeouts are attempts the client gave up on (its timeout, shorter than the
	// API's); ConnErrors attempts that got no answer for another reason.
	Timeouts   int `json:"timeouts"`
	ConnErrors int `json:"conn_errors"`
}

// stormAttempt is one attempt's answer: status 0 when there was none.
type stormAttempt struct {
	status     int
	retryAfter time.Duration
	body       []byte
	timedOut   bool
}

// record counts one attempt of a request to path with the given method.
func (a *StormAnswers) record(method, path string, at stormAttempt) {
	a.Attempts++
	switch {
	case at.status == 0 && at.timedOut:
		a.Timeouts++
	case at.status == 0:
		a.ConnErrors++
	case at.status == http.StatusCreated || at.status == http.StatusOK:
		a.Success++
	case at.status == http.StatusConflict && at.retryAfter > 0:
		a.InFlight++
	case at.status == http.StatusUnprocessableEntity:
		a.Invalid++
	case at.status == http.StatusServiceUnavailable && at.retryAfter > 0:
		a.Busy++
	default:
		a.Wrong++
		if len(a.FirstWrong) < answersShown {
			status := fmt.Sprint(at.status)
			if at.status == http.StatusConflict || at.status == http.StatusServiceUnavailable {
				status += " without Retry-After"
			}
			a.FirstWrong = append(a.FirstWrong, status+" "+method+" "+endpoint(path))
		}
	}
}

// Run sends the storm: cfg.Payments keys of creation paced over cfg.Span, each by
// s.Copies clients at once, and with cfg.Lifecycle each payment's stormPlan the same
// way. It returns what the runner's rows read (payments accepted once per key) and
// keeps, per key, what every client saw for the storm's own rows (Seen).
func (s *Storm) Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	// No client-wide timeout: each attempt has its own (s.attempt).
	client := NewAPIClient(0, cfg.APIKey)
	answers := &answerLog{next: cmp.Or[http.RoundTripper](client.Transport, http.DefaultTransport)}
	client.Transport = answers
	defer client.CloseIdleConnections()
	s.reset()

	res := Result{Started: time.Now(), RejectReasons: map[string]int{}, RetryReasons: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for n := range cfg.Payments {
		if n > 0 && cfg.Span > 0 {
			if err := backoff.Until(ctx, res.Started.Add(cfg.Span*time.Duration(n)/time.Duration(cfg.Payments))); err != nil {
				break
			}
		}
		res.Sent++
		wg.Go(func() {
			p := s.sendKeyed(ctx, client, cfg, n)
			mu.Lock()
			defer mu.Unlock()
			res.Retries += len(p.retryReasons)
			for _, reason := range p.retryReasons {
				res.RetryReasons[reason]++
			}
			if p.rejected != "" {
				res.Rejected++
				res.RejectReasons[p.rejected]++
				return
			}
			res.Accepted++
			res.PaymentIDs = append(res.PaymentIDs, p.paymentID)
			res.AcceptedAt = append(res.AcceptedAt, p.acceptedAt)
			res.Latencies = append(res.Latencies, p.latency)
			res.Events = append(res.Events, p.events...)
			res.Transitions.add(p.transitions)
		})
	}
	wg.Wait()
	res.Ended = time.Now()
	res.ServerErrors = answers.result()
	return res, ctx.Err()
}

// stormPayment is the outcome of one payment's keys, for the runner's totals.
type stormPayment struct {
	paymentID  string
	acceptedAt time.Time
	latency    time.Duration
	// retryReasons lists why each attempt but the last of every client failed.
	retryReasons []string
	rejected     string
	events       []CommittedEvent
	transitions  TransitionStats
}

// sendKeyed sends payment n's creation, then its plan, each key from s.Copies clients
// at once.
func (s *Storm) sendKeyed(ctx context.Context, client *http.Client, cfg Config, n int) stormPayment {
	body, _ := json.Marshal(map[string]any{"user_id": StormUser(n), "amount": int64(1000 + n), "currency": "EUR"})
	key := fmt.Sprintf("%s-%d", cfg.RunID, n)
	start := time.Now()
	created, retried, failed := s.storm(ctx, client, cfg, "/payments", key, body, StormKey{Key: key, N: n, Sequence: 1})
	p := stormPayment{retryReasons: retried}
	if created == nil {
		p.rejected = failed
		return p
	}
	p.paymentID, p.acceptedAt, p.latency = paymentID(created), time.Now(), time.Since(start)
	var first struct {
		EventID string `json:"event_id"`
	}
	_ = json.Unmarshal(created, &first) // the contract fixes the status, not the body
	if first.EventID != "" {
		p.events = append(p.events, CommittedEvent{PaymentID: p.paymentID, EventID: first.EventID, Sequence: 1, Sent: start, At: p.acceptedAt})
	}
	if !cfg.Lifecycle {
		return p
	}
	for _, step := range stormPlan {
		path := "/payments/" + p.paymentID + "/" + step.action
		sent := time.Now()
		answer, retried, failed := s.storm(ctx, client, cfg, path, key+"-"+step.step, nil,
			StormKey{Key: key + "-" + step.step, N: n, Sequence: step.sequence, PaymentID: p.paymentID})
		p.retryReasons = append(p.retryReasons, retried...)
		p.transitions.Requests++
		if answer == nil {
			p.transitions.Failed++
			if p.transitions.FailReasons == nil {
				p.transitions.FailReasons = map[string]int{}
			}
			p.transitions.FailReasons[step.action+": "+failed]++
			return p
		}
		p.transitions.Committed++
		var done struct {
			EventID string `json:"event_id"`
			Version int    `json:"version"`
		}
		_ = json.Unmarshal(answer, &done)
		if done.EventID != "" {
			p.events = append(p.events, CommittedEvent{PaymentID: p.paymentID, EventID: done.EventID, Sequence: done.Version, Sent: sent, At: time.Now()})
		}
	}
	return p
}

// storm sends one key from s.Copies clients at once, each until its own final answer,
// records what they saw under k, and returns the first successful answer's body (nil
// if none), why each retried attempt of every client failed, and why the key failed.
func (s *Storm) storm(ctx context.Context, client *http.Client, cfg Config, path, key string, body []byte, k StormKey) (success []byte, retried []string, failed string) {
	bodies := make([][]byte, s.Copies)
	reasons := make([]string, s.Copies)
	tries := make([][]string, s.Copies)
	atOnce(s.Copies, func(sender int) {
		bodies[sender], tries[sender], reasons[sender] = s.send(ctx, client, cfg, path, key, body)
	})
	for i, b := range bodies {
		retried = append(retried, tries[i]...)
		if b == nil {
			continue
		}
		id := paymentID(b)
		if k.Sequence > 1 {
			var done struct {
				EventID string `json:"event_id"`
			}
			_ = json.Unmarshal(b, &done)
			id = done.EventID
		}
		if success == nil {
			success = b
			if k.Sequence == 1 {
				k.PaymentID = id
			}
		}
		k.IDs = append(k.IDs, id)
	}
	s.recordKey(k)
	if success == nil {
		failed = reasons[0]
	}
	return success, retried, failed
}

// send makes one client's attempts at a key until a final answer: 201 or 200 (its body
// returned), or a 4xx other than a 409 in flight (its reason returned). retried says
// why each attempt that was followed by another failed.
func (s *Storm) send(ctx context.Context, client *http.Client, cfg Config, path, key string, body []byte) (success []byte, retried []string, reason string) {
	delay := s.FirstBackoff
	for attempt := range s.MaxAttempts {
		if attempt > 0 {
			retried = append(retried, reason)
		}
		at := s.attempt(ctx, client, cfg.BaseURL, path, key, body)
		s.recordAnswer(path, at)
		if at.status == http.StatusCreated || at.status == http.StatusOK {
			return at.body, retried, ""
		}
		reason = fmt.Sprintf("status %d", at.status)
		switch {
		case at.status == 0 && at.timedOut:
			reason = "client timeout"
		case at.status == 0:
			reason = "connection error"
		case at.status == http.StatusConflict && at.retryAfter == 0:
			return nil, retried, reason + " without Retry-After"
		case at.status != http.StatusConflict && at.status < 500 && at.status != http.StatusTooManyRequests:
			return nil, retried, reason
		case at.status == http.StatusConflict:
			reason += " in flight"
		}
		wait := delay
		if at.retryAfter > 0 {
			wait = at.retryAfter
		} else {
			delay = min(2*delay, s.MaxBackoff)
		}
		if backoff.Until(ctx, time.Now().Add(wait)) != nil {
			return nil, retried, "cancelled"
		}
	}
	return nil, retried, "out of attempts, last: " + reason
}

// attempt posts once, under a timeout drawn from s.ClientTimeout; it counts as in
// flight (s.inFlight) from the send until the answer or the timeout.
func (s *Storm) attempt(ctx context.Context, client *http.Client, baseURL, path, key string, body []byte) stormAttempt {
	timeout := s.ClientTimeout[0]
	if s.ClientTimeout[1] > timeout {
		timeout += rand.N(s.ClientTimeout[1] - timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(baseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return stormAttempt{}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Idempotency-Key", key)
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	resp, err := client.Do(req)
	if err != nil {
		return stormAttempt{timedOut: errors.Is(err, context.DeadlineExceeded)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		// The status came, the body did not: the answer is lost, as with a reset.
		return stormAttempt{timedOut: errors.Is(err, context.DeadlineExceeded)}
	}
	return stormAttempt{status: resp.StatusCode, retryAfter: retryAfter(resp.Header.Get("Retry-After")), body: b}
}

// retryAfter reads a Retry-After of delay-seconds, with a little jitter so that the
// copies of one key do not come back at the same instant; 0 when absent or unreadable.
func retryAfter(v string) time.Duration {
	secs, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || secs < 0 {
		return 0
	}
	d := time.Duration(secs) * time.Second
	return max(d, 100*time.Millisecond) + rand.N(100*time.Millisecond)
}
