package stack

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// ComposeFile is the compose stack's file, relative to the repository root.
const ComposeFile = "deploy/docker-compose.yml"

// Stack kinds.
const (
	NativeKind  = "native"
	ComposeKind = "compose"
)

// Choose picks where the services run: the native stack unless STACK=compose.
// Whether Docker is installed or running does not matter: the native stack gives every
// scenario, the compose stack only those a service the harness did not start can run
// (package compose), so Docker is used only when asked for. The reason says how to switch.
func Choose(getenv func(string) string) (stack, reason string, err error) {
	switch s := getenv("STACK"); s {
	case "":
		return NativeKind, "the default; STACK=compose runs the services of " + ComposeFile + " in Docker instead", nil
	case NativeKind, ComposeKind:
		return s, "STACK=" + s, nil
	default:
		return "", "", fmt.Errorf("STACK=%q: want native (the default) or compose", s)
	}
}

// Native starts the servers of scripts/stack and remembers which ones it started,
// so it can stop exactly those.
type Native struct {
	Root    string // repository root
	Logger  *slog.Logger
	started []string
	// clusterStarted is set when StartCluster started the three-node cluster.
	clusterStarted bool
}

var stackScripts = []string{"postgres.sh", "kafka.sh", "toxiproxy.sh"}

// Start runs "<script> start" for each server that is not already running. A cold
// Kafka start downloads its jars with Maven, hence the long timeout.
func (s *Native) Start(ctx context.Context) error {
	for _, name := range stackScripts {
		if s.script(ctx, name, "status") == nil {
			s.Logger.Info("stack server already running, left as is", slog.String("script", name))
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err := s.script(ctx, name, "start")
		cancel()
		if err != nil {
			return err
		}
		s.started = append(s.started, name)
		s.Logger.Info("stack server started", slog.String("script", name))
	}
	return nil
}

// StopStarted stops the servers Start and StartCluster started, in reverse order; servers that were
// already running (shared with other developers' tests) are left alone.
func (s *Native) StopStarted(ctx context.Context) error {
	var errs []error
	if err := s.stopCluster(ctx); err != nil {
		errs = append(errs, err)
	}
	for i := len(s.started) - 1; i >= 0; i-- {
		if err := s.script(ctx, s.started[i], "stop"); err != nil {
			errs = append(errs, err)
		}
	}
	s.started = nil
	if len(errs) > 0 {
		return fmt.Errorf("stop stack: %v", errs)
	}
	return nil
}

// RestartPostgres restarts the PostgreSQL server (a fast shutdown: connections are
// cut), for the db-restart scenario.
func (s *Native) RestartPostgres(ctx context.Context) error {
	return s.script(ctx, "postgres.sh", "restart")
}

func (s *Native) script(ctx context.Context, name, verb string) error {
	_, err := devstack.RunScript(ctx, s.Root, name, verb)
	return err
}

// Build compiles the given packages (e.g. "./cmd/api") into binDir and returns the
// binaries' paths, keyed by package.
func Build(ctx context.Context, root, binDir string, pkgs ...string) (map[string]string, error) {
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", binDir, err)
	}
	bins := map[string]string{}
	for _, pkg := range pkgs {
		out := filepath.Join(binDir, filepath.Base(pkg))
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
		bins[pkg] = out
	}
	return bins, nil
}

// RunLockPath is the lock every chaos run holds: machine-wide, like the one Toxiproxy
// proxy it breaks, because a stack started from one checkout serves the others too.
func RunLockPath() string {
	return filepath.Join(os.TempDir(), "payments-outbox-chaos.lock")
}

// LockRuns takes an exclusive lock on path for as long as the returned function is not
// called: the native stack has one proxy kafka_relay, so two chaos runs (make chaos and
// the CI test, say) must not break each other's network. It waits up to wait.
func LockRuns(ctx context.Context, path string, wait time.Duration) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create lock directory: %w", err)
	}
	// Read-only and world-readable: flock needs no write access, so a lock file left by
	// another user of the machine can still be taken.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another chaos run holds %s: %w", path, err)
		}
		if err := backoff.Until(ctx, time.Now().Add(500*time.Millisecond)); err != nil {
			f.Close()
			return nil, fmt.Errorf("wait for %s: %w", path, err)
		}
	}
}
