// Package api is the API benchmark (go run ./cmd/bench api, from the repository's root):
// payments/s through the real cmd/api binary over HTTP, each request authenticated with
// a merchant's API key as a merchant's would be, against the ceiling of the
// database itself for the same transaction, measured by pgbench on the same server; then
// the API's rate with each relay in its process (relays.go). Figures go to
// reports/bench.json. Start at Run.
package api

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/dscourse/payments-outbox/internal/bench/benchenv"
	"github.com/dscourse/payments-outbox/internal/benchreport"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/migrations"
)

const (
	// apiBenchDuration is each measured phase by default: an HTTP attack, or a pgbench
	// run (-duration).
	apiBenchDuration = 12 * time.Second
	// apiBenchWarmup fills the connection pools and the prepared-statement caches
	// before the measured attack.
	apiBenchWarmup = 3 * time.Second
	// apiBenchClients is the number of concurrent HTTP clients, each on one keep-alive
	// connection. More than the API's pool, so that the pool never waits for a client.
	apiBenchClients = 48
	// apiBenchDBClients is pgbench's number of connections: the API's pool size
	// (DATABASE_MAX_CONNS default), so that both sides get the same concurrency at the
	// database.
	apiBenchDBClients = 16
)

// apiBenchRounds is how many times each phase runs by default (-rounds), alternating
// API and pgbench, the best of each being kept: on a shared machine a neighbour's burst can halve one
// phase, and alternating keeps such a burst from favouring one side.
const apiBenchRounds = 2

// Run runs the API benchmark with the flags in args (-h lists them) and merges its
// figures into reports/bench.json.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return benchenv.Run(ctx, args, getenv, stdout, parseAPIFlags, func(env benchenv.Env, cfg apiBenchConfig) error {
		srv, stop, err := startAPI(ctx, env)
		if err != nil {
			return err
		}
		stopAPI := sync.OnceFunc(stop)
		defer stopAPI()
		fmt.Fprintf(stdout, "api on %s, warming up for %s\n", srv.base, apiBenchWarmup)
		if _, err := attackAPI(srv, apiBenchWarmup); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		dbURL, dropDB, err := env.MigratedDatabase(ctx, "bench_db", migrations.Payments)
		if err != nil {
			return err
		}
		defer dropDB()
		var (
			api           apiResult
			db, pipelined dbCeiling
		)
		for round := 1; round <= cfg.rounds; round++ {
			a, err := attackAPI(srv, cfg.duration)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "round %d API:        %6.0f payments/s (p50 %.1f ms, p99 %.1f ms, %d created, %d errors%s, %d clients)\n",
				round, a.PaymentsPerSecond, a.P50Millis, a.P99Millis, a.Created, a.Errors, a.Failures, apiBenchClients)
			d, err := runPgbench(ctx, dbURL, pgbenchScript, cfg.duration)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "round %d DB ceiling: %6.0f tx/s       (pgbench, same transaction, %d clients, avg latency %.1f ms)\n",
				round, d.TransactionsPerSecond, apiBenchDBClients, d.AvgLatencyMillis)
			p, err := runPgbench(ctx, dbURL, pgbenchPipelinedScript, cfg.duration)
			if err != nil {
				return fmt.Errorf("pipelined: %w", err)
			}
			fmt.Fprintf(stdout, "round %d DB ceiling: %6.0f tx/s       (pgbench, same transaction in the API's two round trips, avg latency %.1f ms)\n",
				round, p.TransactionsPerSecond, p.AvgLatencyMillis)
			if a.PaymentsPerSecond > api.PaymentsPerSecond {
				api = a
			}
			if d.TransactionsPerSecond > db.TransactionsPerSecond {
				db = d
			}
			if p.TransactionsPerSecond > pipelined.TransactionsPerSecond {
				pipelined = p
			}
		}
		ratio := api.PaymentsPerSecond / db.TransactionsPerSecond
		pipelinedRatio := api.PaymentsPerSecond / pipelined.TransactionsPerSecond
		fmt.Fprintf(stdout, "best: API %.0f payments/s, DB ceiling %.0f tx/s, API / DB = %.2f (goal >= 0.8); pipelined ceiling %.0f tx/s, API / it = %.2f\n",
			api.PaymentsPerSecond, db.TransactionsPerSecond, ratio, pipelined.TransactionsPerSecond, pipelinedRatio)

		if cfg.cpuProfile != "" {
			if err := profileAPI(srv, cfg, stdout); err != nil {
				return err
			}
		}

		stopAPI() // before the rounds with each relay, which start APIs of their own
		if cfg.withRelays {
			withRelays, err := apiWithRelays(ctx, env, cfg, stdout)
			if err != nil {
				return fmt.Errorf("API with each relay: %w", err)
			}
			if err := benchreport.Merge(benchreport.Path, withRelays); err != nil {
				return err
			}
		}
		return benchreport.Merge(benchreport.Path, map[string]any{
			"api_payments_per_s":  math.Round(api.PaymentsPerSecond),
			"api_latency_p50_ms":  benchreport.Hundredths(api.P50Millis),
			"api_latency_p99_ms":  benchreport.Hundredths(api.P99Millis),
			"api_errors":          api.Errors,
			"api_clients":         apiBenchClients,
			"db_ceiling_tx_per_s": math.Round(db.TransactionsPerSecond),
			"db_ceiling_clients":  apiBenchDBClients,
			"api_to_db_ratio":     benchreport.Hundredths(ratio),
			// The same transaction in the API's round trips (pgbenchPipelinedScript).
			"db_ceiling_pipelined_tx_per_s": math.Round(pipelined.TransactionsPerSecond),
			"api_to_db_pipelined_ratio":     benchreport.Hundredths(pipelinedRatio),
			"api_bench_duration_s":          cfg.duration.Seconds(),
			"api_bench_rounds":              cfg.rounds,
			"api_bench_measured_at":         time.Now().UTC().Format(time.RFC3339),
			// Both phases share the machine with whatever else runs: a high load average
			// means the figures (less so their ratio) are lower than on an idle machine.
			"api_bench_load_avg_1m": benchenv.LoadAverage(),
		})
	})
}

type apiResult struct {
	PaymentsPerSecond    float64
	P50Millis, P99Millis float64
	Created, Errors      int
	// Failures says what the requests that created nothing got: status codes (0 is
	// no answer) and the client's errors, as vegeta counts them.
	Failures string
}

// apiServer is a running cmd/api as the benchmark calls it.
type apiServer struct {
	// base is its URL, http://host:port.
	base string
	// key is a merchant's API key for it, which every request carries: the API turns
	// away a request without one (401), and checking it is part of each request's cost.
	key string
	// admin is its admin listener's URL, whose endpoints want adminToken (-cpuprofile).
	admin, adminToken string
}

// startAPI builds cmd/api and runs it against a fresh database, its relay publishing
// to a throwaway topic as in production. It returns the API and a function that
// stops the API (SIGINT, as an orchestrator would) and removes what it made.
func startAPI(ctx context.Context, env benchenv.Env) (srv apiServer, stop func(), err error) {
	dbURL, dropDB, err := env.CreateDatabase(ctx, "bench_api")
	if err != nil {
		return apiServer{}, nil, err
	}
	srv, stopAPI, err := startAPIOn(ctx, env, dbURL)
	if err != nil {
		dropDB()
		return apiServer{}, nil, err
	}
	return srv, func() { stopAPI(); dropDB() }, nil
}

// startAPIOn is startAPI on an existing database (the API migrates it), with vars
// ("KEY=value") added to the API's environment. It makes a merchant's key first, with
// the binary's own "api keys create", as the chaos harness does. The returned function
// stops the API and deletes its topic; the database is the caller's.
func startAPIOn(ctx context.Context, env benchenv.Env, dbURL string, vars ...string) (srv apiServer, stop func(), err error) {
	var cleanups []func()
	stop = func() {
		for _, f := range slices.Backward(cleanups) {
			f()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()

	topic, dropTopic, err := env.CreateTopic(ctx, "bench.api")
	if err != nil {
		return apiServer{}, nil, err
	}
	cleanups = append(cleanups, dropTopic)
	binDir, err := os.MkdirTemp("", "bench-api-")
	if err != nil {
		return apiServer{}, nil, fmt.Errorf("temp dir: %w", err)
	}
	cleanups = append(cleanups, func() { os.RemoveAll(binDir) })
	bin := filepath.Join(binDir, "api")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/api").CombinedOutput(); err != nil {
		return apiServer{}, nil, fmt.Errorf("go build ./cmd/api: %w\n%s", err, out)
	}
	key, err := load.CreateAPIKey(ctx, bin, dbURL)
	if err != nil {
		return apiServer{}, nil, err
	}

	adminToken := rand.Text() + rand.Text() // ADMIN_TOKEN wants 32 bytes or more
	apiCtx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(apiCtx, bin)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+dbURL, "HTTP_ADDR=127.0.0.1:0", "ADMIN_ADDR=127.0.0.1:0", "ADMIN_TOKEN="+adminToken,
		"KAFKA_BROKERS="+strings.Join(env.Brokers, ","), "KAFKA_TOPIC="+topic)
	cmd.Env = append(cmd.Env, vars...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	logs, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return apiServer{}, nil, fmt.Errorf("api stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return apiServer{}, nil, fmt.Errorf("start api: %w", err)
	}
	cleanups = append(cleanups, func() {
		cancel()
		_ = cmd.Wait()
	})
	addr, adminAddr, err := listeningAddrs(logs, 30*time.Second)
	if err != nil {
		return apiServer{}, nil, err
	}
	go func() { _, _ = io.Copy(io.Discard, logs) }() // keep the pipe drained
	return apiServer{base: "http://" + addr, key: key, admin: "http://" + adminAddr, adminToken: adminToken}, stop, nil
}

// attackAPI sends valid payments to srv for d, each with srv's key and its own
// Idempotency-Key.
func attackAPI(srv apiServer, d time.Duration) (apiResult, error) {
	var n atomic.Int64
	targeter := func(t *vegeta.Target) error {
		i := n.Add(1)
		t.Method = http.MethodPost
		t.URL = srv.base + "/payments"
		t.Body = fmt.Appendf(nil, `{"user_id":"user-%d","amount":%d,"currency":"EUR"}`, i%1000, 100+i%100000)
		t.Header = http.Header{
			"Content-Type":    {"application/json"},
			"Authorization":   {"Bearer " + srv.key},
			"Idempotency-Key": {uuid.NewString()},
		}
		return nil
	}
	attacker := vegeta.NewAttacker(
		vegeta.Workers(apiBenchClients),
		vegeta.MaxWorkers(apiBenchClients),
		vegeta.Connections(apiBenchClients),
		vegeta.KeepAlive(true),
		vegeta.Timeout(10*time.Second),
	)
	var (
		metrics vegeta.Metrics
		created int
	)
	// Rate 0 is "as fast as the workers go": a closed loop of apiBenchClients clients.
	for res := range attacker.Attack(targeter, vegeta.Rate{}, d, "api") {
		metrics.Add(res)
		if res.Code == http.StatusCreated {
			created++
		}
	}
	metrics.Close()
	elapsed := (metrics.Duration + metrics.Wait).Seconds()
	if created == 0 || elapsed == 0 {
		return apiResult{}, fmt.Errorf("no payment created: status codes %v, errors %v", metrics.StatusCodes, metrics.Errors)
	}
	return apiResult{
		PaymentsPerSecond: float64(created) / elapsed,
		P50Millis:         float64(metrics.Latencies.P50) / float64(time.Millisecond),
		P99Millis:         float64(metrics.Latencies.P99) / float64(time.Millisecond),
		Created:           created,
		Errors:            int(metrics.Requests) - created,
		Failures:          failures(metrics),
	}, nil
}

// failures describes the requests of an attack that did not create a payment, "" when
// every one did.
func failures(m vegeta.Metrics) string {
	codes := map[string]int{}
	for code, n := range m.StatusCodes {
		if code != strconv.Itoa(http.StatusCreated) {
			codes[code] = n
		}
	}
	if len(codes) == 0 {
		return ""
	}
	return fmt.Sprintf(" (status codes %v, errors %q)", codes, m.Errors)
}

// listeningAddrs reads cmd/api's JSON log until its "listening" and "admin listening"
// lines, and returns their addresses.
func listeningAddrs(logs io.Reader, timeout time.Duration) (addr, adminAddr string, err error) {
	found := make(chan [2]string, 1)
	go func() {
		defer close(found)
		var addrs [2]string
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &entry) != nil {
				continue
			}
			switch entry.Msg {
			case "listening":
				addrs[0] = entry.Addr
			case "admin listening":
				addrs[1] = entry.Addr
			}
			if addrs[0] != "" && addrs[1] != "" {
				found <- addrs
				return
			}
		}
	}()
	select {
	case addrs, ok := <-found:
		if !ok {
			return "", "", errors.New("api exited before listening (see its log above)")
		}
		return addrs[0], addrs[1], nil
	case <-time.After(timeout):
		return "", "", fmt.Errorf("api did not log \"listening\" and \"admin listening\" within %s", timeout)
	}
}

type dbCeiling struct {
	TransactionsPerSecond float64
	AvgLatencyMillis      float64
}

// pgbenchScript is the API's transaction in SQL, with the same columns and values of
// the same sizes, each statement sent when the one before has answered (BEGIN, three
// INSERTs, COMMIT: five round trips), the plainest client; pgbenchPipelinedScript sends
// the same in the API's two. What is left is what the API adds: HTTP, JSON, Go, the
// lookup of the request's API key (mostly from its cache) and the Idempotency-Key's
// claim, which neither script makes.
//
// Ids are UUIDv7-like (a millisecond timestamp in front), like the API's, so both
// sides insert at the right edge of the primary-key indexes.
const pgbenchScript = `
\set n random(1, 1000000000)
\set amount random(100, 100099)
BEGIN;
INSERT INTO payments (id, user_id, amount, currency, created_at)
VALUES (encode(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 'hex')::uuid,
        'user-' || (:n::bigint % 1000), :amount::bigint, 'EUR', date_trunc('microseconds', now()))
RETURNING id AS pid, created_at AS ts
\gset
INSERT INTO idempotency_keys (merchant_id, key, request_hash, payment_id)
VALUES ('00000000-0000-0000-0000-000000000001', gen_random_uuid()::text, sha256(convert_to(:pid::text || :amount::text, 'UTF8')), :pid::uuid)
ON CONFLICT (merchant_id, key) DO NOTHING;
INSERT INTO outbox_events (id, event_type, aggregate_id, payload, created_at, next_attempt_at, may_have_predecessor)
VALUES (encode(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 'hex')::uuid,
        'PaymentCreated', :pid::text,
        jsonb_build_object('payment_id', :pid::text, 'user_id', 'user-' || (:n::bigint % 1000), 'amount', :amount::bigint,
                           'currency', 'EUR', 'created_at', :ts::text),
        :ts::timestamptz, :ts::timestamptz,
        EXISTS (SELECT 1 FROM outbox_events WHERE aggregate_id = :pid::text));
COMMIT;
`

// pgbenchPipelinedScript is pgbenchScript sent as the API sends it (Store.Create): BEGIN
// and the three INSERTs in one round trip (a pipeline), then COMMIT, so that the
// API's fewer round trips are not counted as an advantage over the database. A
// pipeline cannot read a statement's result (\gset) before the next is sent, so the
// payment's id is computed alike in each statement from a random number and now(),
// the transaction's start, as the API computes it before sending anything. Like
// pgbenchScript, it does not claim the Idempotency-Key: the API does a little more.
const pgbenchPipelinedScript = `
\set n random(1, 1000000000)
\set amount random(100, 100099)
\set r random(0, 4611686018427387903)
\startpipeline
BEGIN;
INSERT INTO payments (id, user_id, amount, currency, created_at)
VALUES (` + pipelinedPaymentID + `, 'user-' || (:n::bigint % 1000), :amount::bigint, 'EUR', date_trunc('microseconds', now()));
INSERT INTO idempotency_keys (merchant_id, key, request_hash, payment_id)
VALUES ('00000000-0000-0000-0000-000000000001', gen_random_uuid()::text, sha256(convert_to(:r::text || :amount::text, 'UTF8')), ` + pipelinedPaymentID + `)
ON CONFLICT (merchant_id, key) DO NOTHING;
INSERT INTO outbox_events (id, event_type, aggregate_id, payload, created_at, next_attempt_at, may_have_predecessor)
SELECT encode(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 'hex')::uuid,
       'PaymentCreated', pid::text,
       jsonb_build_object('payment_id', pid::text, 'user_id', 'user-' || (:n::bigint % 1000), 'amount', :amount::bigint,
                          'currency', 'EUR', 'created_at', date_trunc('microseconds', now())::text),
       now(), now(), EXISTS (SELECT 1 FROM outbox_events WHERE aggregate_id = pid::text)
FROM (SELECT ` + pipelinedPaymentID + ` AS pid) AS p;
\endpipeline
COMMIT;
`

// pipelinedPaymentID is the payment's id in pgbenchPipelinedScript: UUIDv7-like, the
// transaction's start in milliseconds in front of the md5 of the script's :r.
const pipelinedPaymentID = `encode(overlay(uuid_send(md5(:r::text)::uuid) PLACING substring(int8send((extract(epoch FROM now()) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 'hex')::uuid`

var (
	tpsLine     = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	latencyLine = regexp.MustCompile(`latency average = ([0-9.]+) ms`)
)

// runPgbench runs sqlScript (pgbenchScript or pgbenchPipelinedScript) against dbURL,
// which has the payments migrations, for d.
func runPgbench(ctx context.Context, dbURL, sqlScript string, d time.Duration) (dbCeiling, error) {
	script, err := writePgbenchScript(sqlScript)
	if err != nil {
		return dbCeiling{}, err
	}
	defer os.Remove(script)

	out, err := pgbenchCommand(ctx, script, dbURL, apiBenchDBClients, d).CombinedOutput()
	if err != nil {
		return dbCeiling{}, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	tps := tpsLine.FindSubmatch(out)
	latency := latencyLine.FindSubmatch(out)
	if tps == nil || latency == nil {
		return dbCeiling{}, fmt.Errorf("pgbench output without tps or latency:\n%s", out)
	}
	var c dbCeiling
	c.TransactionsPerSecond, _ = strconv.ParseFloat(string(tps[1]), 64)
	c.AvgLatencyMillis, _ = strconv.ParseFloat(string(latency[1]), 64)
	return c, nil
}

// writePgbenchScript writes sqlScript (pgbenchScript or pgbenchPipelinedScript) to a temporary file and returns its path; the
// caller removes it.
func writePgbenchScript(sqlScript string) (string, error) {
	script, err := os.CreateTemp("", "pgbench-payment-*.sql")
	if err != nil {
		return "", fmt.Errorf("pgbench script: %w", err)
	}
	if _, err := script.WriteString(sqlScript); err != nil {
		script.Close()
		os.Remove(script.Name())
		return "", fmt.Errorf("write pgbench script: %w", err)
	}
	if err := script.Close(); err != nil {
		os.Remove(script.Name())
		return "", fmt.Errorf("write pgbench script: %w", err)
	}
	return script.Name(), nil
}

// pgbenchCommand is pgbench running script against dbURL with clients connections for
// d, the way the API benchmark runs it.
func pgbenchCommand(ctx context.Context, script, dbURL string, clients int, d time.Duration, extra ...string) *exec.Cmd {
	// -M prepared: the API's pgx prepares and caches its statements too.
	// -n: no vacuum of pgbench's own tables, which this database does not have.
	args := []string{"-n", "-M", "prepared",
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-T", strconv.Itoa(int(d.Seconds())),
		"-f", script}
	args = append(args, extra...)
	return exec.CommandContext(ctx, "pgbench", append(args, dbURL)...)
}
