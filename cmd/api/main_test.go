package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/dscourse/payments-outbox/internal/merchant"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// run starts goroutines (the HTTP server, the relay); every one must be gone when
// it returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The whole program, in-process, on port 0: the way an operator would use it.
func TestRunServesPaymentsAndShutsDownCleanly(t *testing.T) {
	t.Parallel()
	base, key, stdout, cancel, done := startRun(t)
	if res := httpDo(t, http.MethodGet, base+"/readyz", "", nil); res.StatusCode != http.StatusOK {
		t.Errorf("GET /readyz: status = %d, want 200; body %s", res.StatusCode, res.Body)
	}

	headers := map[string]string{"Content-Type": "application/json", "Idempotency-Key": "e2e-1", "Authorization": "Bearer " + key}
	created := httpDo(t, http.MethodPost, base+"/payments", `{"user_id": "u-42", "amount": 1999, "currency": "EUR"}`, headers)
	if created.StatusCode != http.StatusCreated {
		t.Fatalf("POST /payments: status = %d, want 201; body %s", created.StatusCode, created.Body)
	}
	var p struct {
		ID      string `json:"id"`
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(created.Body, &p); err != nil || p.ID == "" || p.EventID == "" {
		t.Fatalf("POST /payments body %s: want id and event_id (decode error: %v)", created.Body, err)
	}
	replayed := httpDo(t, http.MethodPost, base+"/payments", `{"user_id": "u-42", "amount": 1999, "currency": "EUR"}`, headers)
	if replayed.StatusCode != http.StatusCreated || !bytes.Equal(replayed.Body, created.Body) {
		t.Errorf("replay: status %d body %s, want 201 and the first body %s", replayed.StatusCode, replayed.Body, created.Body)
	}

	got := httpDo(t, http.MethodGet, base+"/payments/"+p.ID, "", bearer(key))
	if got.StatusCode != http.StatusOK {
		t.Fatalf("GET /payments/%s: status = %d, want 200; body %s", p.ID, got.StatusCode, got.Body)
	}
	var view struct {
		ID    string `json:"id"`
		Event struct {
			ID string `json:"id"`
		} `json:"event"`
	}
	if err := json.Unmarshal(got.Body, &view); err != nil {
		t.Fatalf("decode GET body %s: %v", got.Body, err)
	}
	if diff := cmp.Diff([2]string{p.ID, p.EventID}, [2]string{view.ID, view.Event.ID}); diff != "" {
		t.Errorf("GET payment and event ids (-want +got):\n%s", diff)
	}

	// The relay running inside run publishes the event: the outbox path end to end.
	eventually(t, 30*time.Second, "published event in GET /payments/"+p.ID, func() bool {
		var view struct {
			Event struct {
				Status string `json:"status"`
			} `json:"event"`
		}
		res := httpDo(t, http.MethodGet, base+"/payments/"+p.ID, "", bearer(key))
		return json.Unmarshal(res.Body, &view) == nil && view.Event.Status == "published"
	})

	metrics := httpDo(t, http.MethodGet, adminBase(t, stdout)+"/metrics", "", nil)
	for _, want := range []string{
		`http_requests_total{code="201",method="POST",route="/payments"} 2`,
		`http_requests_total{code="200",method="GET",route="/payments/{id}"}`,
		`http_request_duration_seconds_count{method="POST",route="/payments"} 2`,
	} {
		if !bytes.Contains(metrics.Body, []byte(want)) {
			t.Errorf("GET /metrics lacks %s", want)
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v after cancel, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30 s of cancel")
	}
	if !strings.Contains(stdout.String(), `"msg":"stopped"`) {
		t.Errorf("no \"stopped\" log line; output:\n%s", stdout)
	}
}

// An in-flight request finishes during shutdown instead of being cut off.
func TestRunFinishesInFlightRequestsOnShutdown(t *testing.T) {
	t.Parallel()
	base, key, stdout, cancel, done := startRun(t)

	// A request whose body arrives after shutdown began, on a raw connection so that we
	// control exactly when its bytes reach the server. "Expect: 100-continue" makes the
	// server answer "100 Continue" once the handler starts reading the body: from then
	// on the request is provably in flight (an accepted, active connection), so the
	// test cannot race the server's Accept.
	body := `{"user_id": "u-42", "amount": 1999, "currency": "EUR"}`
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	head := fmt.Sprintf("POST /payments HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", key, len(body))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatalf("write head: %v", err)
	}
	responses := bufio.NewReader(conn)
	interim, err := http.ReadResponse(responses, nil)
	if err != nil {
		t.Fatalf("read interim response: %v", err)
	}
	if interim.StatusCode != http.StatusContinue {
		t.Fatalf("interim status = %d, want 100", interim.StatusCode)
	}
	cancel()
	eventually(t, 10*time.Second, "log line \"shutting down\"", func() bool {
		return strings.Contains(stdout.String(), `"msg":"shutting down"`)
	})
	if _, err := io.WriteString(conn, body); err != nil {
		t.Fatalf("write body: %v", err)
	}
	res, err := http.ReadResponse(responses, nil)
	if err != nil {
		t.Fatalf("read response of the in-flight request: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Errorf("in-flight request during shutdown: status = %d, want 201", res.StatusCode)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30 s of cancel")
	}
}

func TestRunFailsFastOnBadConfiguration(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"api"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "DATABASE_URL is required") {
		t.Errorf("run without DATABASE_URL = %v, want an error saying DATABASE_URL is required", err)
	}

	// RELAY_* is read and checked with everything else, before any connection: the
	// database here refuses every connect, and the error must be about the lease.
	env := map[string]string{
		"DATABASE_URL": "postgres://postgres@127.0.0.1:1/payments?sslmode=disable&connect_timeout=1",
		"RELAY_LEASE":  "2s", // shorter than the default publish plus query timeouts
	}
	err = run(context.Background(), []string{"api"}, func(k string) string { return env[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "RELAY_LEASE") || strings.Contains(err.Error(), "payments database") {
		t.Errorf("run with a bad RELAY_LEASE = %v, want a configuration error naming RELAY_LEASE, before connecting to the database", err)
	}

	err = run(context.Background(), []string{"api", "serve-please"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `unknown command "serve-please"`) {
		t.Errorf("run with an unknown command = %v, want an error naming it", err)
	}
}

func TestMigrateSubcommandCreatesTheTables(t *testing.T) {
	t.Parallel()
	// A database with only the other service's tables: the payments set is not applied.
	dbURL := testenv.NewDatabase(t, migrations.Antifraud)

	err := run(context.Background(), []string{"api", "migrate", "--database-url", dbURL}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("api migrate: %v", err)
	}

	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var tables []string
	rows, err := conn.Query(context.Background(), `
		SELECT table_name FROM information_schema.tables
		WHERE table_name IN ('payments', 'idempotency_keys', 'outbox_events') ORDER BY table_name`)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatalf("scan: %v", err)
		}
		tables = append(tables, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("list tables: %v", err)
	}
	if diff := cmp.Diff([]string{"idempotency_keys", "outbox_events", "payments"}, tables); diff != "" {
		t.Errorf("tables after migrate (-want +got):\n%s", diff)
	}
}

// startRun runs the whole program in-process on port 0, with a database and a topic of
// its own, and returns once /healthz answers: the base URL, run's output, the cancel
// that asks run to shut down, and the channel run's error arrives on.
func startRun(t *testing.T) (base, key string, stdout *lineBuffer, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	return startRunWith(t, nil)
}

// startRunWith is startRun with extra (or overriding) environment variables. key is
// an API key of a merchant "test", made with the keys command before run starts.
func startRunWith(t *testing.T, extra map[string]string) (base, key string, stdout *lineBuffer, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	env := map[string]string{
		"DATABASE_URL":  testenv.NewDatabase(t, migrations.Payments),
		"HTTP_ADDR":     "127.0.0.1:0",
		"ADMIN_ADDR":    "127.0.0.1:0",
		"KAFKA_BROKERS": strings.Join(testenv.KafkaBrokers(t), ","),
		"KAFKA_TOPIC":   testenv.NewTopic(t, 3),
	}
	maps.Copy(env, extra)
	key = createKey(t, env["DATABASE_URL"], "test").Key
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stdout = new(lineBuffer)
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"api"}, func(k string) string { return env[k] }, stdout) }()
	base = "http://" + waitForListening(t, stdout, errc, "listening")
	waitForStatus(t, base+"/healthz", http.StatusOK)
	return base, key, stdout, cancel, errc
}

// createKey runs "api keys create --merchant name" on dbURL and returns its answer.
func createKey(t *testing.T, dbURL, name string) merchant.NewKey {
	t.Helper()
	var out bytes.Buffer
	err := run(t.Context(), []string{"api", "keys", "create", "--merchant", name}, func(k string) string {
		return map[string]string{"DATABASE_URL": dbURL}[k]
	}, &out)
	if err != nil {
		t.Fatalf("api keys create --merchant %s: %v", name, err)
	}
	var k merchant.NewKey
	if err := json.Unmarshal(out.Bytes(), &k); err != nil || k.Key == "" {
		t.Fatalf("api keys create printed %q, want one JSON line with api_key (%v)", out.String(), err)
	}
	return k
}

// bearer is the header that sends key.
func bearer(key string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + key}
}

// adminBase is the base URL of the admin listener of a run started by startRun.
func adminBase(t *testing.T, stdout *lineBuffer) string {
	t.Helper()
	return "http://" + waitForListening(t, stdout, nil, "admin listening")
}

// waitForListening returns the address run logged in its line msg, failing if run
// returns first.
func waitForListening(t *testing.T, stdout *lineBuffer, done <-chan error, msg string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range stdout.Lines() {
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == msg {
				return entry.Addr
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run returned before listening: %v\noutput:\n%s", err, stdout)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("run did not log %q within 30 s; output:\n%s", msg, stdout)
	return ""
}

// waitForStatus polls url until it answers with status.
func waitForStatus(t *testing.T, url string, status int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("GET %s answering %d", url, status), func() bool {
		res, err := http.Get(url)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == status
	})
}

// eventually waits until cond holds, failing the test with "no <what>" after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, timeout, func() (bool, string) { return cond(), "no " + what })
}

type response struct {
	StatusCode int
	Body       []byte
}

func httpDo(t *testing.T, method, url, body string, headers map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return response{StatusCode: res.StatusCode, Body: b}
}

// lineBuffer is run's stdout: written by run's goroutines, read by the test.
type lineBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lineBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *lineBuffer) Lines() []string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// A relay that cannot start (here a broker port that is not a number, which the
// configuration's host:port check lets through and the Kafka client refuses) must not
// leave the API taking payments that nothing will publish: run shuts down in order
// and returns the relay's error.
func TestRunStopsWhenTheRelayCannotStart(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":  testenv.NewDatabase(t, migrations.Payments),
		"HTTP_ADDR":     "127.0.0.1:0",
		"KAFKA_BROKERS": "127.0.0.1:x9092",
		"KAFKA_TOPIC":   "unused",
	}
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"api"}, func(k string) string { return env[k] }, io.Discard)
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "outbox relay") {
			t.Errorf("run = %v, want the error of the relay that could not start", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run still serving 30 s after its relay failed to start")
	}
}
