package pgfailover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// A pair is a primary and its synchronous standby, started for one run by
// `PG_NODES=2 scripts/stack/postgres.sh` from a private copy of scripts/stack on free
// ports. The copy is a checkout of its own as far as the script can tell, so its
// servers, data and verbs are the run's alone: the shared server on PGSTACK_PORT, which
// other checkouts' runs and tests use, is never killed or promoted. The failover steps
// are the script's verbs (promote, rebuild), the ones an operator runs.
type pair struct {
	dir    string         // the private copy's root
	ports  devstack.Ports // Postgres is node 1, the first primary; PostgresStandby node 2
	logger *slog.Logger
}

// startPair copies root's scripts/stack and starts a primary and its synchronous
// standby from the copy.
func startPair(ctx context.Context, root string, logger *slog.Logger) (*pair, error) {
	dir, err := os.MkdirTemp("", "payments-outbox-pg-failover-")
	if err != nil {
		return nil, fmt.Errorf("private checkout for the PostgreSQL pair: %w", err)
	}
	p := &pair{dir: dir, ports: devstack.DefaultPorts(), logger: logger}
	if err := os.CopyFS(filepath.Join(dir, "scripts", "stack"), os.DirFS(filepath.Join(root, "scripts", "stack"))); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("copy scripts/stack: %w", err)
	}
	for _, port := range []*int{&p.ports.Postgres, &p.ports.PostgresStandby} {
		addr, err := stack.FreeAddr()
		if err == nil {
			*port, err = strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if _, err := p.script(ctx, "start"); err != nil {
		p.stop(false)
		return nil, err
	}
	return p, nil
}

// script runs a verb of the copy's postgres.sh with PG_NODES=2 on the pair's ports.
// DATABASE_URL would make start use another server, and the harness's own port
// variables would reach the shared one: neither is passed.
func (p *pair) script(ctx context.Context, verb string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(p.dir, "scripts", "stack", "postgres.sh"), verb)
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "DATABASE_URL", "PG_NODES", "PGSTACK_PORT", "PGSTACK_STANDBY_PORT":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PG_NODES=2",
		"PGSTACK_PORT="+strconv.Itoa(p.ports.Postgres), "PGSTACK_STANDBY_PORT="+strconv.Itoa(p.ports.PostgresStandby))
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		return text, fmt.Errorf("PG_NODES=2 postgres.sh %s (pair on %s): %w\n%s", verb, strings.Join(p.addrs(), ", "), err, text)
	}
	return text, nil
}

// adminURL lists both nodes: whichever accepts writes is the one a client keeps
// (devstack.Ports.FollowingURL).
func (p *pair) adminURL() string { return p.ports.FollowingURL("postgres") }

// addrs are node 1's and node 2's addresses.
func (p *pair) addrs() []string {
	return []string{p.ports.PostgresUpstream(), p.ports.PostgresStandbyUpstream()}
}

// nodeURL reaches node n (1 or 2) alone, whatever its role.
func (p *pair) nodeURL(n int) string {
	return "postgres://postgres@" + p.addrs()[n-1] + "/postgres?sslmode=disable&connect_timeout=1"
}

// killPostmaster SIGKILLs node n's postmaster, the way a machine dies: no shutdown
// checkpoint, no goodbye to the clients or the standby. Its backends notice the
// postmaster's death and exit by themselves. It returns the pid once the process is
// gone.
func (p *pair) killPostmaster(ctx context.Context, n int) (int, error) {
	conn, err := pgx.Connect(ctx, p.nodeURL(n))
	if err != nil {
		return 0, fmt.Errorf("connect to node %d: %w", n, err)
	}
	var dataDir string
	err = conn.QueryRow(ctx, `SELECT current_setting('data_directory')`).Scan(&dataDir)
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return 0, fmt.Errorf("read node %d's data directory: %w", n, err)
	}
	pid, err := postmasterPID(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("SIGKILL postmaster %d: %w", pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			return pid, fmt.Errorf("postmaster %d still running 10 s after SIGKILL", pid)
		}
		if err := backoff.Until(ctx, time.Now().Add(10*time.Millisecond)); err != nil {
			return pid, err
		}
	}
	return pid, nil
}

// postmasterPID reads the first line of postmaster.pid, the postmaster's pid.
func postmasterPID(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read the postmaster's pid: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	pid, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
	if err != nil {
		return 0, fmt.Errorf("%s: no pid on its first line: %w", path, err)
	}
	return pid, nil
}

// gone reports whether process pid has exited. pg_ctl's postmaster is nobody's child
// here, so a dead one can stay a zombie until init reaps it: that counts as gone.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false // no /proc (macOS): the signal 0 above is the answer
	}
	// The state follows the command's closing parenthesis: "pid (comm) S ...".
	_, rest, _ := strings.Cut(string(stat), ") ")
	return strings.HasPrefix(rest, "Z")
}

// stop ends both nodes. A passed run's data and copy are deleted; a failed run's are
// kept as evidence, with the command that brings the pair back.
func (p *pair) stop(passed bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	verb := "stop"
	if passed {
		verb = "destroy"
	}
	if _, err := p.script(ctx, verb); err != nil {
		p.logger.Warn("stop the PostgreSQL pair", slog.Any("err", err))
	}
	if !passed {
		p.logger.Info("PostgreSQL pair kept for inspection", slog.String("start_with",
			fmt.Sprintf("PG_NODES=2 PGSTACK_PORT=%d PGSTACK_STANDBY_PORT=%d %s/scripts/stack/postgres.sh start (destroy when done)",
				p.ports.Postgres, p.ports.PostgresStandby, p.dir)))
		return
	}
	if err := os.RemoveAll(p.dir); err != nil {
		p.logger.Warn("remove the PostgreSQL pair's checkout", slog.Any("err", err))
	}
}
