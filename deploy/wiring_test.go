package deploy

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

// The native broker's listener that compose does not have, and the prefix of its settings.
const (
	nativeOnlyListener = "SASL_SSL"
	nativeOnlyPrefix   = "listener.name.sasl_ssl."
)

// TestKafkaConfigMatchesNative: every key of the native broker's server.properties has
// the same value in the compose broker's KAFKA_* environment. Only addresses may differ,
// and those are compared by listener name and port. The native SASL_SSL listener and its
// settings are the exception: they exist to test the clients' TLS and SASL options
// (internal/kafkasec) against a real broker, and the compose broker stays plaintext.
func TestKafkaConfigMatchesNative(t *testing.T) {
	t.Parallel()
	native := nativeBrokerProperties(t)
	kafkaEnv := service(t, loadProject(t), "kafka").Environment

	addressKeys := map[string]bool{
		"listeners":            true,
		"advertised.listeners": true,
		// A dynamic quorum natively, a static voter list in the image (see the compose
		// file); both name the one controller on the CONTROLLER port.
		"controller.quorum.bootstrap.servers": true,
		"listener.security.protocol.map":      true,
		"log.dirs":                            true,
	}
	for key, want := range native {
		if addressKeys[key] || strings.HasPrefix(key, nativeOnlyPrefix) {
			continue
		}
		name := kafkaEnvName(key)
		got, ok := kafkaEnv[name]
		if !ok || got == nil {
			t.Errorf("native %s=%s has no %s in compose", key, want, name)
			continue
		}
		if *got != want {
			t.Errorf("%s = %q, want %q (native %s)", name, *got, want, key)
		}
	}

	nativeListeners := parseListeners(t, native["listeners"])
	composeListeners := parseListeners(t, *kafkaEnv["KAFKA_LISTENERS"])
	for name, l := range nativeListeners {
		if name == nativeOnlyListener {
			continue
		}
		if got := composeListeners[name].port; got != l.port {
			t.Errorf("listener %s port = %q, want native %q", name, got, l.port)
		}
	}

	// The advertised PROXIED port is the proxy's port in both stacks.
	nativeAdv := parseListeners(t, native["advertised.listeners"])
	composeAdv := parseListeners(t, *kafkaEnv["KAFKA_ADVERTISED_LISTENERS"])
	if got, want := composeAdv["PROXIED"].port, nativeAdv["PROXIED"].port; got != want {
		t.Errorf("advertised PROXIED port = %q, want native %q", got, want)
	}

	_, bootstrapPort, err := net.SplitHostPort(native["controller.quorum.bootstrap.servers"])
	if err != nil {
		t.Fatalf("native controller.quorum.bootstrap.servers: %v", err)
	}
	if got, want := *kafkaEnv["KAFKA_CONTROLLER_QUORUM_VOTERS"], native["node.id"]+"@kafka:"+bootstrapPort; got != want {
		t.Errorf("KAFKA_CONTROLLER_QUORUM_VOTERS = %q, want %q", got, want)
	}

	// Every native listener keeps its protocol; compose adds only its HOST listener.
	protocols := func(v string) map[string]string {
		out := map[string]string{}
		for entry := range strings.SplitSeq(v, ",") {
			name, proto, _ := strings.Cut(entry, ":")
			out[name] = proto
		}
		return out
	}
	want := protocols(native["listener.security.protocol.map"])
	delete(want, nativeOnlyListener)
	want["HOST"] = "PLAINTEXT"
	if diff := cmp.Diff(want, protocols(*kafkaEnv["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"])); diff != "" {
		t.Errorf("listener.security.protocol.map (-want +got):\n%s", diff)
	}
}

// TestToxiproxyConfig: the proxy kafka_relay listens where the broker advertises its
// PROXIED listener and forwards to the port that listener is bound on; the proxy
// postgres_api is the native stack's, in front of the postgres service.
func TestToxiproxyConfig(t *testing.T) {
	t.Parallel()
	proxies := toxiproxyProxies(t)
	// kafka_relay, postgres_api (pg-faults), and one proxy per node of the compose
	// profile "cluster" (TestComposeClusterMatchesNative checks those).
	if len(proxies) != 2+devstack.ClusterNodes {
		t.Fatalf("toxiproxy.json has %d proxies, want %d", len(proxies), 2+devstack.ClusterNodes)
	}
	nativePG := shellVariable(t, "../scripts/stack/toxiproxy.sh", "PG_PROXY")
	pg, ok := proxies[nativePG]
	if !ok || !pg.Enabled {
		t.Errorf("toxiproxy.json has no enabled proxy %q, the native stack's proxy in front of PostgreSQL", nativePG)
	}
	if want := net.JoinHostPort("0.0.0.0", strconv.Itoa(devstack.DefaultPorts().PostgresProxy)); pg.Upstream != "postgres:5432" || pg.Listen != want {
		t.Errorf("%s %s -> %s, want %s -> postgres:5432 (the native stack's port)", nativePG, pg.Listen, pg.Upstream, want)
	}
	nativeProxy := shellVariable(t, "../scripts/stack/toxiproxy.sh", "PROXY")
	proxy, ok := proxies[nativeProxy]
	if !ok {
		t.Fatalf("toxiproxy.json has no proxy %q, the native stack's", nativeProxy)
	}
	if !proxy.Enabled {
		t.Error("proxy kafka_relay is disabled at start")
	}

	p := loadProject(t)
	kafkaEnv := service(t, p, "kafka").Environment
	bound := parseListeners(t, *kafkaEnv["KAFKA_LISTENERS"])["PROXIED"]
	advertised := parseListeners(t, *kafkaEnv["KAFKA_ADVERTISED_LISTENERS"])["PROXIED"]

	if want := net.JoinHostPort("kafka", bound.port); proxy.Upstream != want {
		t.Errorf("kafka_relay upstream = %q, want %q (the PROXIED listener)", proxy.Upstream, want)
	}
	listenHost, listenPort, err := net.SplitHostPort(proxy.Listen)
	if err != nil {
		t.Fatalf("kafka_relay listen %q: %v", proxy.Listen, err)
	}
	if listenPort != advertised.port || advertised.host != "toxiproxy" {
		t.Errorf("kafka_relay listens on port %s, broker advertises PROXIED as %s:%s",
			listenPort, advertised.host, advertised.port)
	}
	if listenHost != "0.0.0.0" {
		t.Errorf("kafka_relay listens on %q, want 0.0.0.0 so other containers reach it", listenHost)
	}

	cmd := []string(service(t, p, "toxiproxy").Command)
	if !slices.Contains(cmd, "-host=0.0.0.0") {
		t.Errorf("toxiproxy command %q lacks -host=0.0.0.0: its API would be loopback-only", cmd)
	}
}

// TestComposeEnvMatchesContract: the api and consumer services set the variables that
// docs/contract.md documents for their binaries, and no others.
func TestComposeEnvMatchesContract(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	documented := contractEnvVars(t)
	for svc, binary := range map[string]string{"api": "cmd/api", "api-2": "cmd/api", "consumer": "cmd/consumer"} {
		names := documented[binary]
		if len(names) == 0 {
			t.Fatalf("docs/contract.md documents no variables for %s", binary)
		}
		environment := service(t, p, svc).Environment
		for variable := range environment {
			if !matchesContract(variable, names) {
				t.Errorf("%s sets %s, which docs/contract.md does not document for %s", svc, variable, binary)
			}
		}
		for _, name := range names {
			if strings.HasSuffix(name, "*") {
				continue // a family of tuning knobs with defaults, set only when needed
			}
			if _, ok := environment[name]; !ok {
				t.Errorf("%s does not set %s, documented for %s", svc, name, binary)
			}
		}
	}
}

// TestPrometheusScrapesTheServices: the scrape targets are the ports the services serve
// /metrics on: the API's admin listener, the consumer's HTTP port.
func TestPrometheusScrapesTheServices(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatalf("read prometheus.yml: %v", err)
	}
	p := loadProject(t)
	for name, variable := range map[string]string{"api": "ADMIN_ADDR", "api-2": "ADMIN_ADDR", "consumer": "HTTP_ADDR"} {
		_, port, err := net.SplitHostPort(env(t, service(t, p, name), variable))
		if err != nil {
			t.Fatalf("%s %s: %v", name, variable, err)
		}
		if target := `"` + name + ":" + port + `"`; !strings.Contains(string(data), target) {
			t.Errorf("prometheus.yml does not scrape %s", target)
		}
	}
}

// TestDockerfileBuildsTheEntrypoints: every binary a compose service runs from the
// project image is built by the Dockerfile, from a cmd/ directory that exists.
func TestDockerfileBuildsTheEntrypoints(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatalf("read Dockerfile: %v", err)
	}
	built := map[string]bool{}
	for _, m := range regexp.MustCompile(`\./cmd/([a-z]+)`).FindAllStringSubmatch(string(data), -1) {
		built[m[1]] = true
	}
	if !strings.Contains(string(data), "CGO_ENABLED=0") {
		t.Error("Dockerfile does not build static binaries (CGO_ENABLED=0)")
	}
	from := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(string(data), -1)
	if len(from) < 2 {
		t.Errorf("Dockerfile has %d stages, want a build stage and a runtime stage", len(from))
	}
	for _, m := range from {
		if _, tag, ok := strings.Cut(m[1][strings.LastIndex(m[1], "/")+1:], ":"); !ok || tag == "latest" {
			t.Errorf("Dockerfile: image %q is not pinned to a tag", m[1])
		}
	}
	if !regexp.MustCompile(`(?m)^USER\s+(nonroot|[1-9][0-9]*)`).Match(data) {
		t.Error("Dockerfile: the runtime stage does not switch to a non-root USER")
	}
	for name, s := range loadProject(t).Services {
		if !strings.HasPrefix(s.Image, "payments-outbox:") {
			continue
		}
		if len(s.Entrypoint) == 0 {
			t.Errorf("service %s runs the project image without an explicit entrypoint", name)
			continue
		}
		binary, ok := strings.CutPrefix(s.Entrypoint[0], "/usr/local/bin/")
		if !ok || !built[binary] {
			t.Errorf("service %s runs %q, which the Dockerfile does not build (builds %v)", name, s.Entrypoint[0], built)
			continue
		}
		if _, err := os.Stat("../cmd/" + binary); err != nil {
			t.Errorf("service %s runs %s: %v", name, binary, err)
		}
	}
}

// TestComposeEnvIsReadByTheBinaries: a variable the binary never reads is a setting that
// silently does nothing, for example after a rename in cmd/.
func TestComposeEnvIsReadByTheBinaries(t *testing.T) {
	t.Parallel()
	p := loadProject(t)
	for _, name := range []string{"api", "api-2", "consumer"} {
		s := service(t, p, name)
		binary, _ := strings.CutPrefix(s.Entrypoint[0], "/usr/local/bin/")
		sources, err := filepath.Glob(filepath.Join("..", "cmd", binary, "*.go"))
		if err != nil || len(sources) == 0 {
			t.Fatalf("%s: no Go sources in cmd/%s (%v)", name, binary, err)
		}
		// Both binaries hand their getenv to internal/tracing, which reads the OTEL_*
		// variables that decide whether tracing is on.
		tracing, err := filepath.Glob(filepath.Join("..", "internal", "tracing", "*.go"))
		if err != nil || len(tracing) == 0 {
			t.Fatalf("no Go sources in internal/tracing (%v)", err)
		}
		sources = append(sources, tracing...)
		var code strings.Builder
		for _, path := range sources {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read %s: %v", path, err)
			}
			code.Write(data)
		}
		for variable := range s.Environment {
			if !strings.Contains(code.String(), `"`+variable+`"`) {
				t.Errorf("%s sets %s, which cmd/%s never reads", name, variable, binary)
			}
		}
	}
}
