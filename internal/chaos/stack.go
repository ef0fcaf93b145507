package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for goose
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/migrations"
)

// The native stack's fixed addresses (docs/contract.md).
const (
	// NativeAdminURL is the PostgreSQL admin URL of scripts/stack/postgres.sh.
	NativeAdminURL = "postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable"
	// DirectBroker is Kafka's DIRECT listener: the consumer, the verifier, the admin.
	DirectBroker = "127.0.0.1:19092"
	// ProxiedBroker is the Toxiproxy proxy kafka_relay in front of the PROXIED listener,
	// which advertises this address, so a client seeded here stays behind the proxy.
	ProxiedBroker = "127.0.0.1:29092"
	// ToxiproxyAPI is the native Toxiproxy server's API.
	ToxiproxyAPI = "127.0.0.1:8474"
	// RelayProxy is the name of the proxy between the relay and Kafka.
	RelayProxy = "kafka_relay"
)

// Stack kinds.
const (
	Native  = "native"
	Compose = "compose"
)

// ChooseStack picks where the services run. STACK=native|compose decides; otherwise
// compose is chosen only when a Docker engine answers, and the reason says why.
func ChooseStack(ctx context.Context, getenv func(string) string) (stack, reason string, err error) {
	switch s := getenv("STACK"); s {
	case Native, Compose:
		return s, "STACK=" + s, nil
	case "":
	default:
		return "", "", fmt.Errorf("STACK=%q: want native or compose", s)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := exec.LookPath("docker"); err != nil {
		return Native, "no docker command found", nil
	}
	if err := exec.CommandContext(ctx, "docker", "info").Run(); err != nil {
		return Native, "docker is installed but no engine answers", nil
	}
	return Compose, "a Docker engine answers (set STACK=native to run natively)", nil
}

// NativeStack starts the servers of scripts/stack and remembers which ones it started,
// so it can stop exactly those.
type NativeStack struct {
	Root    string // repository root
	Logger  *slog.Logger
	started []string
}

var stackScripts = []string{"postgres.sh", "kafka.sh", "toxiproxy.sh"}

// Start runs "<script> start" for each server that is not already running. A cold
// Kafka start downloads its jars with Maven, hence the long timeout.
func (s *NativeStack) Start(ctx context.Context) error {
	for _, name := range stackScripts {
		if s.script(ctx, name, "status") == nil {
			s.Logger.Info("stack server already running, left as is", "script", name)
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err := s.script(ctx, name, "start")
		cancel()
		if err != nil {
			return err
		}
		s.started = append(s.started, name)
		s.Logger.Info("stack server started", "script", name)
	}
	return nil
}

// StopStarted stops the servers Start started, in reverse order; servers that were
// already running (shared with other developers' tests) are left alone.
func (s *NativeStack) StopStarted(ctx context.Context) error {
	var errs []error
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
func (s *NativeStack) RestartPostgres(ctx context.Context) error {
	return s.script(ctx, "postgres.sh", "restart")
}

func (s *NativeStack) script(ctx context.Context, name, verb string) error {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(s.Root, "scripts", "stack", name), verb)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("scripts/stack/%s %s: %w\n%s", name, verb, err, strings.TrimSpace(string(out)))
	}
	return nil
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

// CreateDatabase creates database name on the server of adminURL, applies the
// migration set, and returns the database's URL.
func CreateDatabase(ctx context.Context, adminURL, name string, set migrations.Set) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	dbURL, err := withDatabase(adminURL, name)
	if err != nil {
		return "", err
	}
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", name, err)
	}
	defer db.Close()
	if err := set.Up(ctx, db); err != nil {
		return "", fmt.Errorf("migrate %s: %w", name, err)
	}
	return dbURL, nil
}

// DropDatabase drops a database of a passed run, cutting leftover connections.
func DropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// withDatabase swaps the database name in a PostgreSQL URL.
func withDatabase(adminURL, name string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", fmt.Errorf("parse PostgreSQL URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// CreateTopic creates a topic on the DIRECT listener and waits until every partition
// has a leader.
func CreateTopic(ctx context.Context, brokers []string, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("new Kafka admin client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for {
		details, err := adm.ListTopics(ctx, topic)
		if err == nil && details.Error() == nil {
			ready := 0
			for _, p := range details[topic].Partitions {
				if p.Err == nil && p.Leader >= 0 {
					ready++
				}
			}
			if ready == int(partitions) {
				return nil
			}
		}
		if err := waitUntil(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return fmt.Errorf("wait for leaders of %s: %w", topic, err)
		}
	}
}

// DeleteTopic deletes a topic of a passed run.
func DeleteTopic(ctx context.Context, brokers []string, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("new Kafka admin client: %w", err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).DeleteTopic(ctx, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("delete topic %s: %w", topic, err)
	}
	return nil
}

// LockRuns takes an exclusive lock on path for as long as the returned function is not
// called: the native stack has one proxy kafka_relay, so two chaos runs (make chaos and
// the CI test, say) must not break each other's network. It waits up to wait.
func LockRuns(ctx context.Context, path string, wait time.Duration) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create lock directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
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
		if err := waitUntil(ctx, time.Now().Add(500*time.Millisecond)); err != nil {
			f.Close()
			return nil, fmt.Errorf("wait for %s: %w", path, err)
		}
	}
}
