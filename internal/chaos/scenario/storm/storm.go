package storm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// An idempotencyStorm is the idempotency-storm scenario: every Idempotency-Key is sent
// by several clients at once (load.Storm), whose attempts time out before the API's
// own budget and are retried with the same key, while the harness SIGKILLs the API
// Kills times, each time with keyed requests in flight, and restarts it. The API
// reaches PostgreSQL through the Toxiproxy proxy devstack.PostgresProxy with Latency
// added to every statement, so that a write transaction lasts longer than the
// shortest client timeouts: the retry of a timed-out attempt meets its first attempt
// still running, and a kill meets transactions half done.
//
// The service must make one payment (one transition) and one event per key, name the
// same payment (event) in every 201 (200) of a key, and answer nothing but 201 (200),
// 409 with Retry-After, 422 and 503 with Retry-After. The first two are read from
// outside the service, in the payments table and the topic (stormcheck.go).
type idempotencyStorm struct {
	// Storm is the load: its clients, their timeouts and retries.
	*load.Storm
	// Kills is how many times the API is SIGKILLed with keyed requests in flight.
	Kills int
	// Gap is the random range of the wait before each kill (after the previous
	// restart).
	Gap [2]time.Duration
	// Latency is added to every byte from the API to PostgreSQL.
	Latency time.Duration

	mu sync.Mutex
	// kills lists, per kill, the attempts in flight at it.
	kills []int64
}

const stormLatencyToxic = "chaos_pg_storm_latency"

// load forgets an earlier run's kills and sends the storm (load.Storm.Run, which
// forgets its earlier keys and answers).
func (s *idempotencyStorm) load(ctx context.Context, _ *harness.Run, cfg load.Config) (load.Result, error) {
	s.mu.Lock()
	s.kills = nil
	s.mu.Unlock()
	return s.Storm.Run(ctx, cfg)
}

// disrupt slows the API's statements by Latency, then kills the API Kills times while
// the load is sent, each after a random Gap and only while attempts are in flight, and
// restarts it each time. It returns after the last restart (FinishDisruption), or
// when the load has ended with kills still due: the validity row then says how many
// landed.
func (s *idempotencyStorm) disrupt(ctx context.Context, rn *harness.Run) error {
	proxy, err := faults.PostgresProxy(rn.Ports)
	if err != nil {
		return err
	}
	if _, err := proxy.AddToxic(stormLatencyToxic, "latency", "upstream", 1, toxiproxy.Attributes{"latency": s.Latency.Milliseconds()}); err != nil {
		return fmt.Errorf("add latency to %s: %w", proxy.Name, err)
	}
	// The run's end resets every proxy; the drain is faster without the latency.
	defer func() { _ = faults.CleanProxy(proxy) }()
	for range s.Kills {
		if err := backoff.Until(ctx, time.Now().Add(harness.Between(s.Gap))); err != nil {
			return nil
		}
		inFlight, err := s.untilInFlight(ctx, rn)
		if err != nil || inFlight == 0 {
			return nil // the load is over: no kill can meet a keyed request any more
		}
		if err := rn.KillAPI(); err != nil {
			return err
		}
		s.mu.Lock()
		s.kills = append(s.kills, inFlight)
		n := len(s.kills)
		s.mu.Unlock()
		rn.Disrupted("SIGKILL api", fmt.Sprintf("kill %d of %d, %d keyed attempts in flight", n, s.Kills, inFlight))
		if err := rn.StartAPI(ctx); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		rn.Disrupted("api restarted", "")
	}
	return nil
}

// untilInFlight waits, while the load is sent, for an attempt in flight and returns how
// many are; 0 when the load ended first.
func (s *idempotencyStorm) untilInFlight(ctx context.Context, rn *harness.Run) (int64, error) {
	ticks := time.NewTicker(time.Millisecond)
	defer ticks.Stop()
	for rn.Loading() {
		if n := s.InFlight(); n > 0 {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-ticks.C:
		}
	}
	return 0, nil
}

// validity: the kills landed with keyed requests in flight, and the clients' timeouts
// bit (attempts given up on and retried with the same key); then the storm's SLO rows,
// read from outside the service.
func (s *idempotencyStorm) validity(r *verdict.Report, rn *harness.Run) []verdict.Check {
	s.mu.Lock()
	kills := append([]int64(nil), s.kills...)
	s.mu.Unlock()
	keys, answers := s.Seen()
	r.Storm = &verdict.StormReport{Answers: answers, Kills: kills}
	checks := s.validityRows(kills, answers, len(keys))
	outside, err := readStormOutcome(context.Background(), rn.PaymentsDB, rn.Brokers, rn.Topic, r.Schema.PaymentLifecycle)
	if err != nil {
		r.Notes = append(r.Notes, "idempotency storm: "+err.Error())
	}
	r.Storm.Outcome = judgeStorm(keys, outside)
	return append(checks, stormChecks(r.Storm, err)...)
}

// newIdempotencyStorm is the storm of the idempotency-storm scenario, and the span of
// its load: long enough for every kill and restart to meet keys in flight.
func newIdempotencyStorm(short bool) (*idempotencyStorm, time.Duration) {
	s := &idempotencyStorm{
		Storm: &load.Storm{
			Copies:        4,
			ClientTimeout: [2]time.Duration{50 * time.Millisecond, time.Second},
			// With waits of about a second, enough for a key to outlast a restart of the API.
			MaxAttempts:  40,
			FirstBackoff: 50 * time.Millisecond,
			MaxBackoff:   time.Second,
		},
		Kills: 5,
		Gap:   [2]time.Duration{2 * time.Second, 4 * time.Second},
		// About six statements per creation (begin, the key's claim, the payment, the
		// key, the outbox row, commit): some 180 ms, more than the shortest timeouts.
		Latency: 30 * time.Millisecond,
	}
	span := 30 * time.Second
	if short {
		s.Kills, span = 3, 15*time.Second
	}
	return s, span
}

// validityRows are the storm's validity rows: Kills kills, each with attempts in flight
// (kills lists the attempts in flight at each), and client timeouts.
func (s *idempotencyStorm) validityRows(kills []int64, answers load.StormAnswers, keys int) []verdict.Check {
	landed := 0
	for _, n := range kills {
		if n > 0 {
			landed++
		}
	}
	return []verdict.Check{
		verdict.NewCheck(verdict.Validity, "API SIGKILLed and restarted with keyed requests in flight (seen from the clients)", fmt.Sprintf(">= %d kills", s.Kills),
			fmt.Sprintf("%d kills (attempts in flight at each: %v)", landed, kills), landed >= s.Kills),
		verdict.NewCheck(verdict.Validity, "attempts timed out by the client (before the API's 5 s budget) and retried with the same key", "> 0",
			fmt.Sprintf("%d timed out, %d connection errors, of %d attempts at %d keys sent by %d clients at once", answers.Timeouts, answers.ConnErrors, answers.Attempts, keys, s.Copies),
			answers.Timeouts > 0),
	}
}
