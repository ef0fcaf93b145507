package api

// The API's create rate with each relay running: cmd/api with RELAY_MODE=poll
// and with RELAY_MODE=cdc, in alternating rounds, on one database and one broker, each
// round attacked as the API benchmark attacks it. The polling relay's claims and marks
// compete with the API for the database; the CDC relay's cost there is
// the walsender decoding the WAL, plus its marks.

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/dscourse/payments-outbox/internal/bench/measure"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/benchreport"
	"github.com/jackc/pgx/v5/pgxpool"
)

// apiRelayRounds is how many rounds each relay gets; each figure is their median.
const apiRelayRounds = 3

// apiRelayRound is one attack of the API with one relay.
type apiRelayRound struct {
	api     apiResult
	pending float64 // events the relay had not published when the attack ended
	loadAvg float64
}

// apiWithRelays runs the rounds and returns the report's fields.
func apiWithRelays(ctx context.Context, env benchenv.Env, cfg apiBenchConfig, stdout io.Writer) (map[string]any, error) {
	dbURL, dropDB, err := env.CreateDatabase(ctx, "bench_api_relays")
	if err != nil {
		return nil, err
	}
	defer dropDB()
	dropCDCSlot := func() error { return measure.DropSlot(context.WithoutCancel(ctx), env.Admin, dbURL) }
	defer dropCDCSlot() // before the database; an error here was already reported below

	rounds := map[string][]apiRelayRound{}
	for round := 1; round <= apiRelayRounds; round++ {
		for _, mode := range []string{"poll", "cdc"} {
			r, err := attackWithRelay(ctx, env, dbURL, mode, cfg.duration)
			if err != nil {
				return nil, fmt.Errorf("round %d with RELAY_MODE=%s: %w", round, mode, err)
			}
			if mode == "cdc" {
				// A slot left in place would stream the next poll round's inserts to the
				// next cdc round, which would start behind.
				if err := dropCDCSlot(); err != nil {
					return nil, err
				}
			}
			rounds[mode] = append(rounds[mode], r)
			fmt.Fprintf(stdout, "round %d API with %s relay: %6.0f payments/s (p50 %.1f ms, p99 %.1f ms, %d errors%s); %0.f events unpublished at the end; load %.2f\n",
				round, mode, r.api.PaymentsPerSecond, r.api.P50Millis, r.api.P99Millis, r.api.Errors, r.api.Failures, r.pending, r.loadAvg)
		}
	}

	report := map[string]any{"api_relays_rounds": apiRelayRounds}
	for mode, rs := range rounds {
		var rate, p99, pending, load benchreport.Samples
		for _, r := range rs {
			rate, p99 = append(rate, r.api.PaymentsPerSecond), append(p99, r.api.P99Millis)
			pending, load = append(pending, r.pending), append(load, r.loadAvg)
		}
		suffix := "_with_" + mode + "_relay"
		rate.AddTo(report, "api_payments_per_s"+suffix, math.Round)
		p99.AddTo(report, "api_latency_p99_ms"+suffix, benchreport.Hundredths)
		pending.AddTo(report, "api_unpublished_at_end"+suffix, math.Round)
		load.AddTo(report, "api_load_avg_1m"+suffix, benchreport.Hundredths)
	}
	return report, nil
}

// attackWithRelay starts cmd/api on dbURL with the relay of mode in its process, warms
// it up and attacks it, then reads how far its relay was behind.
func attackWithRelay(ctx context.Context, env benchenv.Env, dbURL, mode string, d time.Duration) (apiRelayRound, error) {
	srv, stop, err := startAPIOn(ctx, env, dbURL, "RELAY_MODE="+mode)
	if err != nil {
		return apiRelayRound{}, err
	}
	defer stop()
	if _, err := attackAPI(srv, apiBenchWarmup); err != nil {
		return apiRelayRound{}, fmt.Errorf("warm-up: %w", err)
	}
	api, err := attackAPI(srv, d)
	if err != nil {
		return apiRelayRound{}, err
	}
	r := apiRelayRound{api: api, loadAvg: benchenv.LoadAverage()}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return r, fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'pending'`).Scan(&r.pending); err != nil {
		return r, fmt.Errorf("count unpublished events: %w", err)
	}
	return r, nil
}
