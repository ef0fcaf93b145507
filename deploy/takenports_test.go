package deploy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

// TestTakenPortNamesItsVariable: when any port of the stack is held by a process that is
// not this project's server (here a bare TCP listener that never answers), start fails
// at once with one message naming the port and the variable that moves it, instead of
// hanging or taking the listener for a shared server. Each case runs from a checkout of
// its own with every other port free, so nothing of the shared stack is in the way.
func TestTakenPortNamesItsVariable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		script, variable string
		env              []string // besides the ports
		offset           int      // the variable's value is the taken port minus offset
	}{
		{script: "postgres.sh", variable: "PGSTACK_PORT"},
		{script: "kafka.sh", variable: "KAFKASTACK_DIRECT_PORT"},
		{script: "kafka.sh", variable: "KAFKASTACK_CONTROLLER_PORT"},
		{script: "kafka.sh", variable: "KAFKASTACK_PROXIED_PORT"},
		{script: "kafka.sh", variable: "KAFKASTACK_SASL_SSL_PORT"},
		{script: "toxiproxy.sh", variable: "TOXISTACK_API_PORT"},
		{script: "toxiproxy.sh", variable: "KAFKASTACK_PROXY_PORT"},
		{script: "toxiproxy.sh", variable: "PGSTACK_PROXY_PORT"},
		{script: "toxiproxy.sh", variable: "PGSTACK_CONSUMER_PROXY_PORT"},
		// Node 1's DIRECT listener is the base plus one.
		{script: "kafka.sh", variable: "KAFKASTACK_CLUSTER_PORT", env: []string{"KAFKA_NODES=3"}, offset: 1},
	}
	for _, c := range cases {
		t.Run(c.variable, func(t *testing.T) {
			t.Parallel()
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer taken.Close()
			port := taken.Addr().(*net.TCPAddr).Port
			env := append(freePortsEnv(t), c.env...)
			env = append(env, c.variable+"="+strconv.Itoa(port-c.offset))

			start := time.Now()
			out, err := runStackScript(t, env, filepath.Join(copyCheckout(t), "scripts", "stack", c.script), "start")
			elapsed := time.Since(start)
			if err == nil {
				t.Fatalf("%s start with %s held by a bare listener: exit 0, want a failure; it said:\n%s", c.script, c.variable, out)
			}
			for _, want := range []string{"127.0.0.1:" + strconv.Itoa(port), c.variable + "=", "not this project's"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s start said:\n%s\nwant it to contain %q", c.script, out, want)
				}
			}
			if n := strings.Count(out, "is taken by"); n != 1 {
				t.Errorf("%s start said %d times that a port is taken, want once:\n%s", c.script, n, out)
			}
			// PostgreSQL's probe waits for an answer up to its connect timeout (3 s).
			if elapsed > 15*time.Second {
				t.Errorf("%s start took %s to fail, want a few seconds", c.script, elapsed.Round(time.Millisecond))
			}
		})
	}
}

// TestForeignPostgresIsNotShared: a PostgreSQL that answers on PGSTACK_PORT but was not
// started by scripts/stack (a student's own server, here a private one of this test) has
// no owner record: start refuses it, naming PGSTACK_PORT, and status does not call it
// running, where the scripts used to take any server that answered for a shared stack.
func TestForeignPostgresIsNotShared(t *testing.T) {
	t.Parallel()
	foreign := testenv.NewPrivatePostgres(t)
	u, err := url.Parse(foreign.URL)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	env := append(freePortsEnv(t), "PGSTACK_PORT="+port)
	script := filepath.Join(copyCheckout(t), "scripts", "stack", "postgres.sh")

	out, err := runStackScript(t, env, script, "start")
	if err == nil || !strings.Contains(out, "PGSTACK_PORT=") || !strings.Contains(out, "127.0.0.1:"+port) {
		t.Errorf("postgres.sh start with another PostgreSQL on %s: err %v, said:\n%s\nwant a failure naming the port and PGSTACK_PORT", port, err, out)
	}
	if out, err := runStackScript(t, env, script, "status"); err == nil {
		t.Errorf("postgres.sh status with another PostgreSQL on %s: exit 0, want 1; it said:\n%s", port, out)
	}
}

// copyCheckout copies scripts/stack into a temporary directory, a checkout of its own
// as far as the scripts can tell, and returns its root. The directory is private (0700),
// as a checkout under a private home directory is.
func copyCheckout(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "scripts", "stack"), os.DirFS(filepath.Join("..", "scripts", "stack"))); err != nil {
		t.Fatalf("copy scripts/stack: %v", err)
	}
	return root
}

// freePortsEnv sets every port variable of the stack to a port that is free now.
func freePortsEnv(t *testing.T) []string {
	t.Helper()
	var env []string
	for _, v := range devstack.PortVars() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if v.Name == "KAFKASTACK_CLUSTER_PORT" {
			port = min(port, 65535-303)
		}
		env = append(env, v.Name+"="+strconv.Itoa(port))
	}
	return env
}

// runStackScript runs a stack script with env in place of the test's own stack settings:
// no DATABASE_URL or KAFKA_BROKERS (with them, start would do nothing for another
// reason), no port variable but those of env. It runs in cleanups too, after the
// test's context has ended, hence a context of its own.
func runStackScript(t *testing.T, env []string, path string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{path}, args...)...)
	ours := map[string]bool{"DATABASE_URL": true, "KAFKA_BROKERS": true, "KAFKA_NODES": true}
	for _, v := range devstack.PortVars() {
		ours[v.Name] = true
	}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !ours[name] {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestForeignKafkaAndToxiproxyAreNotShared: a server that answers the probes of
// kafka.sh (an ApiVersions request) or toxiproxy.sh (GET /version), but was not started
// by scripts/stack, has no owner record: start refuses it, naming the variable, where
// the scripts used to take any server that answered for a shared stack. The servers
// here are this test's own, and answer nothing but the probe.
func TestForeignKafkaAndToxiproxyAreNotShared(t *testing.T) {
	t.Parallel()
	kafka := serve(t, func(conn net.Conn) {
		// The probe's ApiVersions v0 request is 19 bytes; the answer it checks is a size,
		// correlation id 1 and error code 0 (NONE).
		if _, err := io.ReadFull(conn, make([]byte, 19)); err == nil {
			_, _ = conn.Write([]byte{0, 0, 0, 6, 0, 0, 0, 1, 0, 0})
		}
	})
	toxiproxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"version":"2.12.0"}`)
	}))
	t.Cleanup(toxiproxy.Close)

	for _, c := range []struct {
		script, variable string
		addr             net.Addr
	}{
		{"kafka.sh", "KAFKASTACK_DIRECT_PORT", kafka},
		{"toxiproxy.sh", "TOXISTACK_API_PORT", toxiproxy.Listener.Addr()},
	} {
		port := strconv.Itoa(c.addr.(*net.TCPAddr).Port)
		env := append(freePortsEnv(t), c.variable+"="+port)
		script := filepath.Join(copyCheckout(t), "scripts", "stack", c.script)
		out, err := runStackScript(t, env, script, "start")
		if err == nil || !strings.Contains(out, c.variable+"=") || !strings.Contains(out, "127.0.0.1:"+port) {
			t.Errorf("%s start with a server not ours on %s: err %v, said:\n%s\nwant a failure naming the port and %s", c.script, port, err, out, c.variable)
		}
		if out, err := runStackScript(t, env, script, "status"); err == nil {
			t.Errorf("%s status with a server not ours on %s: exit 0, want 1; it said:\n%s", c.script, port, out)
		}
	}
}

// serve answers every connection to a loopback listener with handle, until the test ends.
func serve(t *testing.T, handle func(net.Conn)) net.Addr {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			go func() {
				defer conn.Close()
				handle(conn)
			}()
		}
	}()
	return l.Addr()
}
