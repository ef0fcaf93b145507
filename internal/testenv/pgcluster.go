package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PrivatePostgres is a PostgreSQL server of one test's own: its own data directory
// (initdb into a temporary directory) and its own port. A test that must restart or
// stop the server uses one, because the shared server of PostgresURL serves every
// other test and engineer on the machine and must never be restarted from a test.
type PrivatePostgres struct {
	// URL is the admin URL (role postgres, database postgres).
	URL string
	// Addr is the server's host:port, for a multi-host URL (MultiHostURL).
	Addr string

	bin  string // the server's binaries, pg_config --bindir
	data string
	opts string // server options, passed on every start as postgres.sh does
}

// NewPrivatePostgres initdbs and starts a throwaway server with wal_level=logical (the
// CDC relay's setting) on a free loopback port, and removes it when the test ends.
// It costs about two seconds; use it only where the shared server will not do.
func NewPrivatePostgres(tb testing.TB) *PrivatePostgres {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return newPrivate(tb, ctx, func(pg *PrivatePostgres) error {
		if out, err := pg.asOwner(ctx, filepath.Join(pg.bin, "initdb"), "-D", pg.data, "-U", "postgres",
			"--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync").CombinedOutput(); err != nil {
			return fmt.Errorf("initdb: %w\n%s", err, out)
		}
		return nil
	})
}

// newPrivate makes a server of the test's own: a data directory that fill lays out
// (initdb, or a base backup of another server), a free port, and a start with the
// options of every private server. The server is stopped and its directory removed
// when the test ends.
func newPrivate(tb testing.TB, ctx context.Context, fill func(pg *PrivatePostgres) error) *PrivatePostgres {
	tb.Helper()
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		tb.Fatalf("pg_config --bindir (install the PostgreSQL server package): %v", err)
	}
	bin := strings.TrimSpace(string(out))
	// Not tb.TempDir: PostgreSQL refuses to run as root, so under root the server runs
	// as the postgres user, who cannot enter the test's own (0700, root) temp tree.
	data, err := os.MkdirTemp("", "testenv-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	pg := &PrivatePostgres{bin: bin, data: data}
	tb.Cleanup(func() {
		_ = pg.ctl(context.Background(), "-m", "immediate", "-w", "-t", "30", "stop") // a failed start leaves nothing to stop
		_ = os.RemoveAll(data)
	})
	if err := chownToServerUser(data); err != nil {
		tb.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		tb.Fatal(err)
	}
	if err := fill(pg); err != nil {
		tb.Fatal(err)
	}
	pg.opts = fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories='' "+
		"-c wal_level=logical -c fsync=off -c max_connections=50 -c shared_buffers=32MB", port)
	if err := pg.ctl(ctx, "-w", "-t", "60", "start"); err != nil {
		tb.Fatalf("start PostgreSQL: %v", err)
	}
	pg.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	pg.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	return pg
}

// Restart is `pg_ctl restart -m fast`: every connection is closed, a shutdown
// checkpoint is written, and the server starts again on the same port and data. It
// returns once the new server accepts connections.
func (pg *PrivatePostgres) Restart(ctx context.Context) error {
	return pg.ctl(ctx, "-m", "fast", "-w", "-t", "60", "restart")
}

func (pg *PrivatePostgres) ctl(ctx context.Context, args ...string) error {
	args = append([]string{"-D", pg.data, "-l", filepath.Join(pg.data, "server.log"), "-o", pg.opts}, args...)
	if out, err := pg.asOwner(ctx, filepath.Join(pg.bin, "pg_ctl"), args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(pg.data, "server.log"))
		return fmt.Errorf("pg_ctl %s: %w\n%s\nserver.log:\n%s", strings.Join(args[len(args)-1:], " "), err, out, tail(log, 2000))
	}
	return nil
}

// asOwner runs the command as the postgres user when the test runs as root, as
// scripts/stack/postgres.sh does.
func (pg *PrivatePostgres) asOwner(ctx context.Context, name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

func chownToServerUser(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root needs the postgres user (the server package creates it): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dir, uid, gid)
}

// freePort asks the kernel for a free loopback port. Another process could take it
// before the server binds it; the start then fails loudly, it never reaches a
// server that is not the test's.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
