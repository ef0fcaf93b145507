package deploy

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

const composePath = "docker-compose.yml"

// loadProject loads docker-compose.yml with the compose specification's loader, which
// validates it against the schema, interpolates ${VAR:-default} and resolves paths. The
// environment is empty so that the result never depends on the machine running the test;
// every profile is enabled so that k6 is checked too.
func loadProject(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{composePath},
		cli.WithWorkingDirectory("."),
		cli.WithEnv(nil),
		cli.WithProfiles([]string{"*"}),
	)
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	project, err := cli.ProjectFromOptions(context.Background(), opts)
	if err != nil {
		t.Fatalf("load %s: %v", composePath, err)
	}
	return project
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("service %q: %v", name, err)
	}
	return s
}

// env returns a service's environment variable, failing the test if it is not set.
func env(t *testing.T, s types.ServiceConfig, name string) string {
	t.Helper()
	v, ok := s.Environment[name]
	if !ok || v == nil {
		t.Fatalf("service %s: environment variable %s is not set", s.Name, name)
	}
	return *v
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	p := loadProject(t)

	got := p.ServiceNames()
	slices.Sort(got)
	want := []string{"api", "api-2", "consumer", "grafana", "jaeger", "k6", "kafka", "kafka-1", "kafka-2", "kafka-3", "kafka-cluster-init", "kafka-init", "postgres", "postgres-standby", "prometheus", "toxiproxy"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("services (-want +got):\n%s", diff)
	}
	if got := service(t, p, "k6").Profiles; !slices.Equal(got, []string{"load"}) {
		t.Errorf("k6 profiles = %q, want [load]: a plain `up` must not start the load", got)
	}
	if got := service(t, p, "kafka-cluster-init").Profiles; !slices.Equal(got, []string{"cluster"}) {
		t.Errorf("kafka-cluster-init profiles = %q, want [cluster]", got)
	}
}

// TestComposeImagesArePinned: an unpinned image changes under the students' feet; "latest"
// and a missing tag are the same thing.
func TestComposeImagesArePinned(t *testing.T) {
	t.Parallel()
	for name, s := range loadProject(t).Services {
		if s.Image == "" {
			t.Errorf("service %s has no image", name)
			continue
		}
		if strings.Contains(s.Image, "@sha256:") {
			continue
		}
		ref := s.Image[strings.LastIndex(s.Image, "/")+1:]
		_, tag, ok := strings.Cut(ref, ":")
		if !ok || tag == "" || tag == "latest" {
			t.Errorf("service %s: image %q is not pinned to a version tag", name, s.Image)
		}
	}
}

// TestComposeKafkaRouting is the point of the topology: the relay reaches Kafka only
// through Toxiproxy, the consumer never does.
func TestComposeKafkaRouting(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	kafkaEnv := service(t, p, "kafka").Environment
	advertised := parseListeners(t, *kafkaEnv["KAFKA_ADVERTISED_LISTENERS"])

	proxied := advertised["PROXIED"]
	wantRelay := net.JoinHostPort(proxied.host, proxied.port)
	if wantRelay != "toxiproxy:29092" {
		t.Errorf("kafka advertises PROXIED as %s, want toxiproxy:29092", wantRelay)
	}
	if got := env(t, service(t, p, "api"), "KAFKA_BROKERS"); got != wantRelay {
		t.Errorf("api KAFKA_BROKERS = %q, want %q (the proxy)", got, wantRelay)
	}

	direct := advertised["DIRECT"]
	wantConsumer := net.JoinHostPort(direct.host, direct.port)
	if wantConsumer != "kafka:19092" {
		t.Errorf("kafka advertises DIRECT as %s, want kafka:19092", wantConsumer)
	}
	got := env(t, service(t, p, "consumer"), "KAFKA_BROKERS")
	if got != wantConsumer {
		t.Errorf("consumer KAFKA_BROKERS = %q, want %q (direct)", got, wantConsumer)
	}
	if strings.Contains(got, "toxiproxy") || strings.Contains(got, proxied.port) {
		t.Errorf("consumer KAFKA_BROKERS = %q goes through the proxy", got)
	}
}

// TestComposeTopicMatchesNative: one topic name and partition count in both stacks.
func TestComposeTopicMatchesNative(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	wantTopic := shellVariable(t, kafkaScriptPath, "TOPIC")
	wantPartitions := shellVariable(t, kafkaScriptPath, "TOPIC_PARTITIONS")

	for _, name := range []string{"api", "consumer"} {
		if got := env(t, service(t, p, name), "KAFKA_TOPIC"); got != wantTopic {
			t.Errorf("%s KAFKA_TOPIC = %q, want %q", name, got, wantTopic)
		}
	}
	init := service(t, p, "kafka-init")
	args := []string(init.Entrypoint)
	if got := flagValue(args, "--topic"); got != wantTopic {
		t.Errorf("kafka-init creates topic %q, want %q", got, wantTopic)
	}
	if got := flagValue(args, "--partitions"); got != wantPartitions {
		t.Errorf("kafka-init creates %q partitions, want %q", got, wantPartitions)
	}
	if got := flagValue(args, "--bootstrap-server"); got != "kafka:19092" {
		t.Errorf("kafka-init bootstraps at %q, want the DIRECT listener kafka:19092", got)
	}
}

func flagValue(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

// TestComposeDependencies: `docker compose up` must start things in an order that works,
// and a service_healthy condition is only meaningful if the service has a healthcheck.
func TestComposeDependencies(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	want := map[string]map[string]string{
		"kafka-init": {"kafka": types.ServiceConditionHealthy},
		"api": {
			"postgres":   types.ServiceConditionHealthy,
			"toxiproxy":  types.ServiceConditionHealthy,
			"kafka-init": types.ServiceConditionCompletedSuccessfully,
		},
		// api-2 also waits for api, which builds the image both run.
		"api-2": {
			"postgres":   types.ServiceConditionHealthy,
			"toxiproxy":  types.ServiceConditionHealthy,
			"kafka-init": types.ServiceConditionCompletedSuccessfully,
			"api":        types.ServiceConditionStarted,
		},
		"consumer": {
			"postgres":   types.ServiceConditionHealthy,
			"kafka-init": types.ServiceConditionCompletedSuccessfully,
			"api":        types.ServiceConditionStarted,
		},
		"k6": {
			"api":   types.ServiceConditionStarted,
			"api-2": types.ServiceConditionStarted,
		},
		"grafana": {"prometheus": types.ServiceConditionStarted},
	}
	for name, deps := range want {
		got := map[string]string{}
		for dep, d := range service(t, p, name).DependsOn {
			got[dep] = d.Condition
		}
		if diff := cmp.Diff(deps, got); diff != "" {
			t.Errorf("%s depends_on (-want +got):\n%s", name, diff)
		}
	}
	for name, s := range p.Services {
		for dep, d := range s.DependsOn {
			if d.Condition != types.ServiceConditionHealthy {
				continue
			}
			if hc := service(t, p, dep).HealthCheck; hc == nil || len(hc.Test) == 0 {
				t.Errorf("%s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
			}
		}
	}
}

// TestComposeBindMountsExist: a typo in a host path makes Docker create an empty directory
// in its place, and the service starts with no configuration.
func TestComposeBindMountsExist(t *testing.T) {
	t.Parallel()
	for name, s := range loadProject(t).Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if filepath.Base(v.Target) == "results" {
				continue // written by k6; created on first run
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("service %s mounts %s: %v", name, v.Source, err)
			}
		}
	}
}

// TestComposeHostPortsMatchNative: tools on the host use the native stack's addresses
// whichever stack runs.
func TestComposeHostPortsMatchNative(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	want := map[string]string{ // service -> host port published on 127.0.0.1
		"postgres":  strconv.Itoa(devstack.DefaultPorts().Postgres),
		"kafka":     strconv.Itoa(devstack.DefaultPorts().KafkaDirect),
		"toxiproxy": strconv.Itoa(devstack.DefaultPorts().Toxiproxy),
		"api":       "8080",
		"api-2":     "8082", // HTTP_ADDR=127.0.0.1:8082 make run-api
		"consumer":  "8081",
	}
	for name, port := range want {
		s := service(t, p, name)
		found := false
		for _, pc := range s.Ports {
			if pc.Published == port {
				found = true
				if pc.HostIP != "127.0.0.1" {
					t.Errorf("%s publishes %s on %q, want 127.0.0.1 only", name, port, pc.HostIP)
				}
			}
		}
		if !found {
			t.Errorf("%s does not publish host port %s", name, port)
		}
	}
	for name, port := range map[string]string{"api": "8080", "api-2": "8082", "consumer": "8081"} {
		_, got, err := net.SplitHostPort(env(t, service(t, p, name), "HTTP_ADDR"))
		if err != nil || got != port {
			t.Errorf("%s HTTP_ADDR port = %q (%v), want %s", name, got, err, port)
		}
	}
}

// nativeServerOptions returns the -c settings of scripts/stack/postgres.sh's SERVER_OPTIONS.
func nativeServerOptions(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "scripts", "stack", "postgres.sh"))
	if err != nil {
		t.Fatalf("read postgres.sh: %v", err)
	}
	var native []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if value, ok := strings.CutPrefix(line, "SERVER_OPTIONS="); ok {
			native = strings.Fields(strings.Trim(value, `"`))
		}
	}
	return serverOptions(native)
}

// serverOptions returns the -c name=value settings in a list of arguments.
func serverOptions(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(args); i++ {
		if args[i] != "-c" {
			continue
		}
		if name, value, ok := strings.Cut(args[i+1], "="); ok {
			out[name] = value
		}
	}
	return out
}

// The CDC relay needs wal_level=logical and the benchmark needs pg_stat_statements: both
// are start-up settings, so the compose server must be started with the same -c options
// as the native one (scripts/stack/postgres.sh, SERVER_OPTIONS). Both bound the WAL a
// slot may hold (max_slot_wal_keep_size).
func TestComposePostgresOptionsMatchNative(t *testing.T) {
	t.Parallel()
	want := nativeServerOptions(t)
	if want["wal_level"] != "logical" {
		t.Errorf("postgres.sh SERVER_OPTIONS: wal_level = %q, want logical (the CDC relay needs it)", want["wal_level"])
	}
	if v := want["max_slot_wal_keep_size"]; v == "" || v == "-1" {
		t.Errorf("postgres.sh SERVER_OPTIONS: max_slot_wal_keep_size = %q, want a bound: a slot nobody reads would fill the disk", v)
	}
	got := serverOptions(service(t, loadProject(t), "postgres").Command)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("compose postgres command options differ from postgres.sh SERVER_OPTIONS (-native +compose):\n%s", diff)
	}
}
