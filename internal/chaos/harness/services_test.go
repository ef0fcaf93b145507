package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/testenv"
)

func TestServiceCommandsValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cmds ServiceCommands
		want []string // substrings of the error; none: valid
	}{
		{"both", ServiceCommands{API: "./api", Consumer: "./consumer"}, nil},
		{"no consumer", ServiceCommands{API: "./api"}, []string{"-consumer-cmd is empty"}},
		{"blank api", ServiceCommands{API: "  ", Consumer: "./consumer"}, []string{"-api-cmd is empty"}},
		{"neither", ServiceCommands{}, []string{"-api-cmd is empty", "-consumer-cmd is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cmds.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: got %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: got nil, want an error naming %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: got %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// A student's commands get the contract's variables and the optional tuning, and run
// through the shell; only our binaries get the knobs only they have.
func TestServiceEnvProcesses(t *testing.T) {
	t.Parallel()
	env := serviceEnv{PaymentsDB: "postgres://p", ConsumerDB: "postgres://c", Topic: "t", Group: "g", APIAddr: "127.0.0.1:1", ConsumerAddr: "127.0.0.1:2", AdminAddr: "127.0.0.1:3",
		RelayBrokers: []string{"127.0.0.1:29092"}, ConsumerBrokers: []string{"127.0.0.1:19092"}}
	sc := Scenario{APIEnv: []string{"OURS_ONLY=1"}, ConsumerEnv: []string{"KAFKA_SESSION_TIMEOUT=6s"}, ReferenceConsumerEnv: []string{"ANTIFRAUD_CRASH_AFTER_DB_COMMIT_PROB=0.3"}}
	names := func(vars []string) []string {
		var out []string
		for _, v := range vars {
			out = append(out, strings.SplitN(v, "=", 2)[0])
		}
		return out
	}

	api, consumer := env.processes(nil, &ServiceCommands{API: "cd /srv && exec ./api", Consumer: "./consumer --flag"}, sc, "/logs")
	if api.MetricsBase() != api.BaseURL {
		t.Errorf("a student's /metrics at %q, want its HTTP_ADDR %q", api.MetricsBase(), api.BaseURL)
	}
	if diff := cmp.Diff([]string{"/bin/sh", "-c", "cd /srv && exec ./api"}, api.Argv); diff != "" {
		t.Errorf("student api argv (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/bin/sh", "-c", "./consumer --flag"}, consumer.Argv); diff != "" {
		t.Errorf("student consumer argv (-want +got):\n%s", diff)
	}
	wantAPI := []string{"DATABASE_URL", "KAFKA_BROKERS", "KAFKA_TOPIC", "HTTP_ADDR", "RELAY_PUBLISH_TIMEOUT", "RELAY_LEASE", "RELAY_OUTAGE_BACKOFF_MAX"}
	if diff := cmp.Diff(wantAPI, names(api.Env)); diff != "" {
		t.Errorf("student api env (-want +got):\n%s", diff)
	}
	wantConsumer := []string{"DATABASE_URL", "KAFKA_BROKERS", "KAFKA_TOPIC", "KAFKA_GROUP", "HTTP_ADDR", "KAFKA_SESSION_TIMEOUT"}
	if diff := cmp.Diff(wantConsumer, names(consumer.Env)); diff != "" {
		t.Errorf("student consumer env (-want +got):\n%s", diff)
	}
	if api.Env[1] != "KAFKA_BROKERS=127.0.0.1:29092" || consumer.Env[1] != "KAFKA_BROKERS=127.0.0.1:19092" {
		t.Errorf("brokers: got api %q, consumer %q; want the relay behind the proxy and the consumer direct", api.Env[1], consumer.Env[1])
	}

	api, consumer = env.processes(map[string]string{"./cmd/api": "/bin/api", "./cmd/consumer": "/bin/consumer"}, nil, sc, "/logs")
	if diff := cmp.Diff([]string{"/bin/api"}, api.Argv); diff != "" {
		t.Errorf("our api argv (-want +got):\n%s", diff)
	}
	// RELAY_MODE is ours only too: a student's service has its own relay. So is
	// ADMIN_ADDR: a student's /metrics is read at its HTTP_ADDR.
	if diff := cmp.Diff(append(wantAPI, "DUAL_WRITE", "RELAY_MODE", "ADMIN_ADDR", "OURS_ONLY"), names(api.Env)); diff != "" {
		t.Errorf("our api env (-want +got):\n%s", diff)
	}
	if got, want := api.MetricsBase(), "http://"+env.AdminAddr; env.AdminAddr == "" || got != want {
		t.Errorf("our api's /metrics at %q, want its ADMIN_ADDR %q", got, want)
	}
	if diff := cmp.Diff(append(wantConsumer, "ANTIFRAUD_CRASH_AFTER_DB_COMMIT_PROB"), names(consumer.Env)); diff != "" {
		t.Errorf("our consumer env (-want +got):\n%s", diff)
	}
}

// A student's command is often a shell that starts the real server as its child:
// Kill must take the child down too, or the old server would keep serving.
func TestProcessKillTakesTheWholeGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	p := &stack.Process{Name: "shell", Argv: shellArgv("sleep 300 & echo $! > " + pidFile + "; wait"), LogPath: filepath.Join(dir, "log")}
	if err := p.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	childPID := waitFor(t, "the shell to start its child", func() (int, bool) {
		b, err := os.ReadFile(pidFile)
		n, convErr := strconv.Atoi(strings.TrimSpace(string(b)))
		return n, err == nil && convErr == nil
	})
	t.Cleanup(func() { _ = syscall.Kill(childPID, syscall.SIGKILL) }) // when the test fails
	if err := p.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	waitFor(t, "the shell's child "+strconv.Itoa(childPID)+" to die with it", func() (bool, bool) { return true, !alive(childPID) })
}

// alive reports whether pid is a process that has not died (a zombie has died).
func alive(pid int) bool {
	state := testenv.ProcState(pid)
	return state != "" && state != "Z"
}

// waitFor polls f every 10 ms until it reports ok, for at most 5 s, and returns its value.
func waitFor[T any](t *testing.T, what string, f func() (T, bool)) T {
	t.Helper()
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	deadline := time.After(5 * time.Second)
	for {
		if v, ok := f(); ok {
			return v
		}
		select {
		case <-ticker.C:
		case <-deadline:
			t.Fatalf("waited 5 s for %s", what)
		}
	}
}

// The CDC relay's replication session must see the run's wal_sender_timeout, or a
// frozen relay would keep its slot for the server's 60 s and replica-pause would test
// nothing; the polling relay's API gets the URL unchanged.
func TestCDCAPIGetsTheWalSenderTimeout(t *testing.T) {
	t.Parallel()
	dbURL := testenv.PostgresURL(t)
	binaries := map[string]string{"./cmd/api": "/bin/api", "./cmd/consumer": "/bin/consumer"}
	databaseURL := func(mode string) string {
		api, _ := serviceEnv{RelayMode: mode, PaymentsDB: dbURL}.processes(binaries, nil, Scenario{}, "/logs")
		return strings.TrimPrefix(api.Env[0], "DATABASE_URL=")
	}
	if got := databaseURL(verdict.RelayModePoll); got != dbURL {
		t.Errorf("poll mode DATABASE_URL = %q, want %q unchanged", got, dbURL)
	}

	// The relay's own way in: a replication connection (cdc.connect) from that URL.
	cfg, err := pgconn.ParseConfig(databaseURL(verdict.RelayModeCDC))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	ctx := t.Context()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	results, err := conn.Exec(ctx, "SHOW wal_sender_timeout").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(results[0].Rows[0][0]), "10s"; got != want {
		t.Errorf("wal_sender_timeout of the CDC relay's replication session = %q, want %q", got, want)
	}
}
