package load

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mathrand "math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/event"
)

// Config describes the load: the same scenario as loadtest/k6/payments.js.
type Config struct {
	// BaseURL of the API, e.g. http://127.0.0.1:8080. Required.
	BaseURL string
	// Replicas are the base URLs of further API processes on the same database. With
	// them, the load spreads like a round-robin load balancer: attempt a of payment n
	// goes to the (n+a)-th URL of BaseURL and Replicas, so a retry reaches another
	// replica, and the Idempotency-Key, kept in the shared database, makes that safe.
	Replicas []string
	// RunID prefixes every Idempotency-Key ("<run-id>-<n>"), so two runs never share a
	// key. Required.
	RunID string
	// Payments is how many payments to send. Default 100.
	Payments int
	// Span spreads the sends evenly over this duration. Default 0: all at once, in
	// parallel, as the course's scenario asks.
	Span time.Duration
	// Bursts, with a Span, sends the payments in this many bursts of parallel
	// requests, evenly over the span, instead of one by one. Default 0: one by one.
	Bursts int
	// LargestEvery, when set, makes every LargestEvery-th payment (n = k*every-1) the
	// largest valid payment there is (see the poison scenario): the longest user id the
	// API accepts, 64 characters that do not compress, and an amount of 19 random
	// digits. With Lifecycle it is captured and refunded in full, and that refund is the
	// largest event the API can write. Default 0: none.
	LargestEvery int
	// APIKey, when set, goes with every request (NewAPIClient).
	APIKey string
	// RequestTimeout bounds one HTTP attempt. Default 10 s.
	RequestTimeout time.Duration
	// MaxAttempts bounds the attempts per payment, the first included. Default 10.
	MaxAttempts int
	// Lifecycle sends each accepted payment on through its transitions (capture, refund,
	// cancel, and races of two; lifecycleload.go) right after its 201. Default false:
	// creations only, as a service without the lifecycle endpoints can take.
	Lifecycle bool
	// StepGap, with Lifecycle, is the wait before each transition of a plan, after the
	// previous answer: a payment then keeps getting events for a few seconds, as while
	// one of its events waits in a DLQ. Default 0: each step right after the last.
	StepGap time.Duration
	// FirstBackoff is the wait before the first retry; it doubles up to MaxBackoff.
	// Defaults 250 ms and 4 s.
	FirstBackoff time.Duration
	MaxBackoff   time.Duration
	// SameKeyEvery, when set, sends one payment in every SameKeyEvery (n % every ==
	// every/2) from several clients at once with its one Idempotency-Key, and with
	// Lifecycle each of its transitions too (samekey.go). Default 0: none.
	SameKeyEvery int
}

// url returns the base URL of request i (see Replicas).
func (c Config) url(i int) string {
	if len(c.Replicas) == 0 {
		return c.BaseURL
	}
	all := append([]string{c.BaseURL}, c.Replicas...)
	return all[i%len(all)]
}

func (c Config) withDefaults() Config {
	c.Payments = cmp.Or(c.Payments, 100)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, 10*time.Second)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 10)
	c.FirstBackoff = cmp.Or(c.FirstBackoff, 250*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 4*time.Second)
	return c
}

// Validate reports a configuration the load generator cannot run with.
func (c Config) Validate() error {
	switch {
	case c.BaseURL == "":
		return errors.New("load: BaseURL is required (the API, e.g. http://127.0.0.1:8080)")
	case c.RunID == "":
		return errors.New("load: RunID is required (it makes the Idempotency-Keys unique)")
	case c.Payments < 0 || c.Span < 0 || c.Bursts < 0:
		return errors.New("load: Payments, Span and Bursts must not be negative")
	}
	return nil
}

// Result is what the clients saw.
type Result struct {
	Sent     int
	Accepted int // answered 201, possibly after retries
	Rejected int // gave up: a 4xx, or retries exhausted
	// Retries counts attempts beyond the first (503s, timeouts, connection errors).
	Retries int
	// RetryReasons counts why attempts were retried, e.g. "status 503 with Retry-After" or "transport
	// error": what the clients themselves saw of a disruption.
	RetryReasons map[string]int
	// PaymentIDs are the ids the API returned with its 201s.
	PaymentIDs []string
	// AcceptedAt is when each payment of PaymentIDs was answered 201.
	AcceptedAt []time.Time
	// RejectReasons counts why payments were rejected, e.g. "status 422" or
	// "connection refused".
	RejectReasons map[string]int
	// Latencies of each accepted payment, from the first attempt to the 201.
	Latencies []time.Duration
	// Transitions is what the lifecycle requests saw (Config.Lifecycle).
	Transitions TransitionStats
	// Events are the events the API answered as committed, creations (sequence 1) and
	// transitions, with when the answer came: what the order evidence compares with
	// when each event reached the topic.
	Events []CommittedEvent
	// SameKey is what the clients saw of the keys sent by several clients at once.
	SameKey SameKeyStats
	// ServerErrors counts the 5xx answers of every attempt but 503 with Retry-After
	// (Answers5xxRow).
	ServerErrors ServerErrors
	// Attempts are every POST /payments the load made, the same-key copies' included,
	// in no particular order: when each was answered, not only how often, is what a
	// fault with an end (a failover) is judged by.
	Attempts []Attempt
	Started  time.Time
	Ended    time.Time
}

// An Attempt is one POST /payments and its answer.
type Attempt struct {
	Sent, Answered time.Time
	// Refused is why the attempt got no 201, as in Result.RetryReasons ("status 503
	// with Retry-After", "transport error"); empty for a 201.
	Refused string
}

// Percentiles summarises the latencies.
func (r Result) Percentiles() Percentiles {
	if len(r.Latencies) == 0 {
		return Percentiles{}
	}
	sorted := slices.Clone(r.Latencies)
	slices.Sort(sorted)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(sorted)))) - 1
		return float64(sorted[max(i, 0)]) / float64(time.Millisecond)
	}
	return Percentiles{P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: at(1)}
}

// outcome of one payment, after all its attempts.
type outcome struct {
	paymentID  string
	acceptedAt time.Time
	latency    time.Duration
	retries    int
	// retryReasons lists why each retried attempt failed.
	retryReasons []string
	// attempts are every attempt made for the payment (Result.Attempts).
	attempts []Attempt
	rejected string // empty when accepted
	// eventID is the PaymentCreated's id from the 201, if the body had one.
	eventID     string
	transitions TransitionStats
	events      []CommittedEvent
	sameKey     SameKeyStats
}

// Run sends the payments and waits for every one of them to end: accepted,
// rejected, or out of attempts. Each payment keeps its Idempotency-Key across retries,
// so a retry after a 503 or a lost response can never create a second payment.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	client := NewAPIClient(cfg.RequestTimeout, cfg.APIKey)
	answers := &answerLog{next: cmp.Or[http.RoundTripper](client.Transport, http.DefaultTransport)}
	client.Transport = answers
	defer client.CloseIdleConnections()

	res := Result{Started: time.Now(), RejectReasons: map[string]int{}, RetryReasons: map[string]int{}}
	outcomes := make([]outcome, cfg.Payments)
	var wg sync.WaitGroup
	for n := range cfg.Payments {
		if cfg.Span > 0 && n > 0 {
			// Pace the sends: payment n leaves at n/Payments of the span, or with its
			// burst: burst b of B leaves at b/B of the span.
			due := res.Started.Add(cfg.Span * time.Duration(n) / time.Duration(cfg.Payments))
			if cfg.Bursts > 0 {
				burst := n * cfg.Bursts / cfg.Payments
				due = res.Started.Add(cfg.Span * time.Duration(burst) / time.Duration(cfg.Bursts))
			}
			if err := backoff.Until(ctx, due); err != nil {
				break
			}
		}
		res.Sent++
		wg.Go(func() {
			var o outcome
			var sameKey SameKeyStats
			if sameKeyLoad(cfg, n) {
				o, sameKey = sendPaymentCopies(ctx, client, cfg, n)
			} else {
				o = sendPayment(ctx, client, cfg, n, 0)
			}
			if o.rejected == "" && cfg.Lifecycle {
				var transitionsSameKey SameKeyStats
				o.transitions, o.events, transitionsSameKey = runLifecycle(ctx, client, cfg, n, o.paymentID)
				sameKey.add(transitionsSameKey)
			}
			o.sameKey = sameKey
			outcomes[n] = o
		})
	}
	wg.Wait()
	res.Ended = time.Now()
	res.ServerErrors = answers.result()

	for _, o := range outcomes[:res.Sent] {
		res.Retries += o.retries
		res.SameKey.add(o.sameKey)
		res.Attempts = append(res.Attempts, o.attempts...)
		for _, reason := range o.retryReasons {
			res.RetryReasons[reason]++
		}
		if o.rejected != "" {
			res.Rejected++
			res.RejectReasons[o.rejected]++
			continue
		}
		res.Accepted++
		res.Transitions.add(o.transitions)
		if o.eventID != "" {
			res.Events = append(res.Events, CommittedEvent{PaymentID: o.paymentID, EventID: o.eventID, Sequence: 1, Sent: o.acceptedAt.Add(-o.latency), At: o.acceptedAt})
		}
		res.Events = append(res.Events, o.events...)
		res.PaymentIDs = append(res.PaymentIDs, o.paymentID)
		res.AcceptedAt = append(res.AcceptedAt, o.acceptedAt)
		res.Latencies = append(res.Latencies, o.latency)
	}
	return res, ctx.Err()
}

// sendPayment posts payment n until it is accepted, rejected for good, or out of
// attempts. sender numbers the clients that send one payment at once (samekey.go): with
// replicas, each copy starts on another one.
func sendPayment(ctx context.Context, client *http.Client, cfg Config, n, sender int) outcome {
	body, _ := json.Marshal(map[string]any{
		"user_id":  userID(cfg, n),
		"amount":   amount(cfg, n),
		"currency": "EUR",
	})
	key := fmt.Sprintf("%s-%d", cfg.RunID, n)
	start := time.Now()
	delay := cfg.FirstBackoff
	var failed []string // why each attempt so far failed
	var attempts []Attempt
	for attempt := range cfg.MaxAttempts {
		if attempt > 0 {
			if err := backoff.Until(ctx, time.Now().Add(delay)); err != nil {
				return outcome{retries: attempt - 1, retryReasons: failed[:attempt-1], attempts: attempts, rejected: "cancelled"}
			}
			delay = min(2*delay, cfg.MaxBackoff)
		}
		sent := time.Now()
		id, eventID, retry, reason := postPayment(ctx, client, cfg.url(n+attempt+sender), key, body)
		attempts = append(attempts, Attempt{Sent: sent, Answered: time.Now(), Refused: reason})
		if reason == "" {
			return outcome{paymentID: id, eventID: eventID, acceptedAt: time.Now(), latency: time.Since(start), retries: attempt, retryReasons: failed, attempts: attempts}
		}
		if !retry {
			return outcome{retries: attempt, retryReasons: failed, attempts: attempts, rejected: reason}
		}
		failed = append(failed, reason)
	}
	return outcome{retries: cfg.MaxAttempts - 1, retryReasons: failed[:cfg.MaxAttempts-1], attempts: attempts, rejected: "out of attempts, last: " + failed[len(failed)-1]}
}

// userID is payment n's user: one of 20, so that the antifraud rules see repeat users,
// or for each largest payment (Config.LargestEvery) a user of its own whose id has
// the most characters validation allows (event.MaxUserIDLength), random after a
// readable prefix so that the relay's compression cannot shrink it back.
func userID(cfg Config, n int) string {
	if largest(cfg, n) {
		random := rand.Text() + rand.Text() // 2 × 26 base32 characters
		return LargestUserIDPrefix + random[:event.MaxUserIDLength-len(LargestUserIDPrefix)]
	}
	return fmt.Sprintf("chaos-user-%d", n%20)
}

// amount is payment n's amount: 1000 + n, or for each largest payment 19 random digits,
// the most an int64 holds.
func amount(cfg Config, n int) int64 {
	if largest(cfg, n) {
		const least = 1_000_000_000_000_000_000 // the smallest 19-digit number
		return least + mathrand.Int64N(math.MaxInt64-least)
	}
	return int64(1000 + n)
}

func largest(cfg Config, n int) bool {
	return cfg.LargestEvery > 0 && (n+1)%cfg.LargestEvery == 0
}

// LargestUserIDPrefix starts the user id of every largest payment
// (Config.LargestEvery), so that the verifier can find them in the database.
const LargestUserIDPrefix = "chaos-large-"

// postPayment makes one attempt. It returns the payment id (and its event's id, if the
// body has one) on a 201, or why not and whether the same request may be sent again.
func postPayment(ctx context.Context, client *http.Client, baseURL, key string, body []byte) (id, eventID string, retry bool, reason string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(baseURL, "/")+"/payments", bytes.NewReader(body))
	if err != nil {
		return "", "", false, "build request: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		// Connection refused, reset, or timed out: the outcome is unknown, and the
		// Idempotency-Key makes sending it again safe.
		return "", "", true, "transport error"
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", "", true, "read response"
	}
	switch {
	case resp.StatusCode == http.StatusCreated:
		id := paymentID(b)
		if id == "" {
			return "", "", false, "201 without a payment id"
		}
		var created struct {
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal(b, &created) // optional: the contract fixes the status only
		return id, created.EventID, false, ""
	case resp.StatusCode == http.StatusServiceUnavailable:
		// The database is down or slow: the API must say when to come back.
		if resp.Header.Get("Retry-After") == "" {
			return "", "", true, "status 503 without Retry-After"
		}
		return "", "", true, "status 503 with Retry-After"
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusConflict, resp.StatusCode == http.StatusTooManyRequests:
		// 503 while the database restarts; 409 while another request with the same
		// key is in flight.
		return "", "", true, fmt.Sprintf("status %d", resp.StatusCode)
	default:
		return "", "", false, fmt.Sprintf("status %d", resp.StatusCode)
	}
}

// paymentID finds the payment id in a 201 body: {"id": ...}, {"payment_id": ...} or
// either under "payment". The contract fixes the status, not the body's shape.
func paymentID(body []byte) string {
	var doc map[string]any
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	for _, obj := range []any{doc, doc["payment"]} {
		m, _ := obj.(map[string]any)
		for _, k := range []string{"id", "payment_id"} {
			if s, ok := m[k].(string); ok && s != "" {
				return s
			}
		}
	}
	return ""
}

// Percentiles of the load generator's request latency, retries included, in ms.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}
