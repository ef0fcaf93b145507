package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecondCheckoutSharesTheRunningStack copies scripts/stack into a temporary second
// checkout, as a mentor's copy of a student's service beside ours would be, and runs
// status and start there against the stack that make test (or another checkout) started:
// both must succeed, say where the running server comes from, and start nothing.
func TestSecondCheckoutSharesTheRunningStack(t *testing.T) {
	t.Parallel()
	second := t.TempDir()
	if err := os.CopyFS(filepath.Join(second, "scripts", "stack"), os.DirFS(filepath.Join("..", "scripts", "stack"))); err != nil {
		t.Fatalf("copy scripts/stack: %v", err)
	}
	for _, script := range []string{"postgres.sh", "kafka.sh", "toxiproxy.sh"} {
		if out, err := stackScript(t, filepath.Join("..", "scripts", "stack", script), "status"); err != nil {
			t.Fatalf("%s status in this checkout: %v\n%s\n(the stack must run: make stack-up)", script, err, out)
		}
		for _, verb := range []string{"status", "start"} {
			out, err := stackScript(t, filepath.Join(second, "scripts", "stack", script), verb)
			if err != nil {
				t.Errorf("%s %s in a second checkout: %v\n%s", script, verb, err, out)
				continue
			}
			// Each server names the checkout that started it in its own state (lib.sh,
			// "who started a server"), wherever its data lives: without that name the
			// db-restart scenario could not hand the restart to that checkout.
			if !strings.Contains(out, "started from /") || strings.Contains(out, "started from "+second) {
				t.Errorf("%s %s in a second checkout said:\n%s\nwant it to name the checkout that started the server", script, verb, out)
			}
		}
	}
	// Nothing was started from the second checkout: no pid file, no data directory.
	for _, path := range []string{".stack/kafka/kafka.pid", ".stack/toxiproxy/toxiproxy.pid", ".stack/postgres", ".stack/kafka/data"} {
		if _, err := os.Stat(filepath.Join(second, path)); err == nil {
			t.Errorf("the second checkout has %s: it started a server of its own", path)
		}
	}
}

// stackScript runs a stack script with an environment that points nowhere else:
// with DATABASE_URL or KAFKA_BROKERS set, start would do nothing for another reason.
func stackScript(t *testing.T, path, verb string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "bash", path, verb)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "KAFKA_BROKERS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
