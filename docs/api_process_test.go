package docs

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// adminToken is the ADMIN_TOKEN the API under test runs with (at least 32 bytes).
const adminToken = "openapi-test-token-0123456789abcdef"

// startAPI builds cmd/api and runs it as a separate process, the way students and the
// compose stack run it: on a fresh payments database, the real Kafka broker and a topic
// of its own, and ports the kernel picks. It returns the base URLs of the API and of its
// admin listener (/metrics, /admin/) once /healthz answers, and the database URL; it stops the process (SIGTERM, then SIGKILL after 20 s) when the
// test ends.
func startAPI(t *testing.T) (base, admin, databaseURL, apiKey string) {
	t.Helper()
	binary := filepath.Join(t.TempDir(), "api")
	build := exec.Command("go", "build", "-o", binary, "./cmd/api")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/api: %v\n%s", err, out)
	}

	databaseURL = testenv.NewDatabase(t, migrations.Payments)
	// A merchant's key, made the way an operator makes one, before the API starts.
	keys := exec.Command(binary, "keys", "create", "--merchant", "openapi")
	keys.Env = append(os.Environ(), "DATABASE_URL="+databaseURL)
	out, err := keys.Output()
	var created struct {
		Key string `json:"api_key"`
	}
	if err != nil || json.Unmarshal(out, &created) != nil || created.Key == "" {
		t.Fatalf("api keys create: %v; printed %q", err, out)
	}
	apiKey = created.Key
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+databaseURL,
		"KAFKA_BROKERS="+strings.Join(testenv.KafkaBrokers(t), ","),
		"KAFKA_TOPIC="+testenv.NewTopic(t, 3),
		"HTTP_ADDR=127.0.0.1:0",
		"ADMIN_ADDR=127.0.0.1:0",
		"ADMIN_TOKEN="+adminToken,
		"ALERT_WEBHOOK_URL=",
		"DUAL_WRITE=false",
	)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("stdout pipe: %v", err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start api: %v", err)
	}

	// The API logs JSON lines; "listening" and "admin listening" carry the addresses the
	// kernel chose.
	// The goroutine reads stdout to the end so the process never blocks on a full pipe;
	// it ends when the process exits and closes its end.
	addrs, adminAddrs := make(chan string, 1), make(chan string, 1)
	logDone := make(chan struct{})
	var logTail []string
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			logTail = append(logTail[max(len(logTail)-19, 0):], line)
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &entry) != nil || entry.Addr == "" {
				continue
			}
			switch entry.Msg {
			case "listening":
				addrs <- entry.Addr
			case "admin listening":
				adminAddrs <- entry.Addr
			}
		}
	}()
	t.Cleanup(func() {
		stopProcess(t, cmd)
		<-logDone
		if t.Failed() {
			t.Logf("api stdout (last lines):\n%s\napi stderr:\n%s", strings.Join(logTail, "\n"), stderr.String())
		}
	})

	timeout := time.After(60 * time.Second)
	for _, ch := range []chan string{addrs, adminAddrs} {
		select {
		case addr := <-ch:
			if ch == addrs {
				base = "http://" + addr
			} else {
				admin = "http://" + addr
			}
		case <-logDone:
			t.Fatalf("api exited before listening")
		case <-timeout:
			t.Fatalf("api did not log its listening addresses within 60 s")
		}
	}
	waitForHealthz(t, base)
	return base, admin, databaseURL, apiKey
}

func stopProcess(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("api did not shut down cleanly on SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Errorf("api still running 20 s after SIGTERM; killed")
	}
}

// waitForHealthz polls /healthz until it answers 200, for at most 30 s.
func waitForHealthz(t *testing.T, base string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("GET %s/healthz: no 200 within 30 s", base)
		case <-tick.C:
		}
	}
}
