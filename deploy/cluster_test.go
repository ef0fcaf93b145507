package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/dscourse/payments-outbox/internal/devstack"
)

// clusterPropertiesPath is the native cluster's per-node template.
var clusterPropertiesPath = filepath.Join("..", "scripts", "stack", "kafka", "cluster.properties.tmpl")

// TestComposeClusterMatchesNative: the compose profile "cluster" runs the same three
// nodes as KAFKA_NODES=3 scripts/stack/kafka.sh, with the same broker settings, on the
// native ports (devstack's cluster addresses), each PROXIED listener behind its own
// Toxiproxy proxy, and the same topic.
func TestComposeClusterMatchesNative(t *testing.T) {
	t.Parallel()
	native := readProperties(t, clusterPropertiesPath)
	p := loadProject(t)
	addressKeys := map[string]bool{
		"node.id": true, "controller.quorum.voters": true, "listeners": true,
		"advertised.listeners": true, "listener.security.protocol.map": true, "log.dirs": true,
	}
	proxies := toxiproxyProxies(t)
	for node := int32(1); node <= devstack.ClusterNodes; node++ {
		name := fmt.Sprintf("kafka-%d", node)
		s := service(t, p, name)
		if !slices.Equal(s.Profiles, []string{"cluster"}) {
			t.Errorf("%s profiles = %q, want [cluster]: a plain `up` must not start three more brokers", name, s.Profiles)
		}
		for key, want := range native {
			if addressKeys[key] {
				continue
			}
			if got := env(t, s, kafkaEnvName(key)); got != want {
				t.Errorf("%s %s = %q, want %q (native %s)", name, kafkaEnvName(key), got, want, key)
			}
		}
		if got := env(t, s, "KAFKA_NODE_ID"); got != strconv.Itoa(int(node)) {
			t.Errorf("%s KAFKA_NODE_ID = %q, want %d", name, got, node)
		}
		listeners := parseListeners(t, env(t, s, "KAFKA_LISTENERS"))
		advertised := parseListeners(t, env(t, s, "KAFKA_ADVERTISED_LISTENERS"))
		_, directPort, _ := net.SplitHostPort(devstack.DefaultPorts().ClusterDirectBroker(node))
		_, proxyPort, _ := net.SplitHostPort(devstack.DefaultPorts().ClusterProxiedBroker(node))
		if got := listeners["DIRECT"].port; got != directPort {
			t.Errorf("%s DIRECT port = %q, want native %s", name, got, directPort)
		}
		if got := advertised["PROXIED"]; got.host != "toxiproxy" || got.port != proxyPort {
			t.Errorf("%s advertises PROXIED as %s:%s, want toxiproxy:%s", name, got.host, got.port, proxyPort)
		}
		published := false
		for _, pc := range s.Ports {
			published = published || (pc.Published == directPort && pc.HostIP == "127.0.0.1")
		}
		if !published {
			t.Errorf("%s does not publish 127.0.0.1:%s (its HOST listener, the native DIRECT address)", name, directPort)
		}
		proxy, ok := proxies[devstack.ClusterProxy(node)]
		if !ok {
			t.Errorf("toxiproxy.json has no proxy %s", devstack.ClusterProxy(node))
			continue
		}
		if want := net.JoinHostPort(name, listeners["PROXIED"].port); proxy.Upstream != want {
			t.Errorf("%s upstream = %q, want %q (the PROXIED listener)", proxy.Name, proxy.Upstream, want)
		}
		if want := net.JoinHostPort("0.0.0.0", proxyPort); proxy.Listen != want {
			t.Errorf("%s listens on %q, want %q (where %s advertises PROXIED)", proxy.Name, proxy.Listen, want, name)
		}
	}

	args := []string(service(t, p, "kafka-cluster-init").Entrypoint)
	if got := flagValue(args, "--replication-factor"); got != strconv.Itoa(devstack.ClusterReplicationFactor) {
		t.Errorf("kafka-cluster-init replication factor = %q, want %d", got, devstack.ClusterReplicationFactor)
	}
	for _, want := range []string{"min.insync.replicas=" + strconv.Itoa(devstack.ClusterMinInsyncReplicas), "unclean.leader.election.enable=false"} {
		if !slices.Contains(args, want) {
			t.Errorf("kafka-cluster-init does not set --config %s", want)
		}
	}
	if got, want := flagValue(args, "--topic"), shellVariable(t, kafkaScriptPath, "TOPIC"); got != want {
		t.Errorf("kafka-cluster-init creates topic %q, want %q", got, want)
	}
}

// toxiproxyProxy is one entry of toxiproxy.json.
type toxiproxyProxy struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`
	Upstream string `json:"upstream"`
	Enabled  bool   `json:"enabled"`
}

// toxiproxyProxies reads toxiproxy.json, by proxy name.
func toxiproxyProxies(t *testing.T) map[string]toxiproxyProxy {
	t.Helper()
	data, err := os.ReadFile("toxiproxy.json")
	if err != nil {
		t.Fatalf("read toxiproxy.json: %v", err)
	}
	var list []toxiproxyProxy
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatalf("toxiproxy.json is not an array of proxies: %v", err)
	}
	out := map[string]toxiproxyProxy{}
	for _, p := range list {
		out[p.Name] = p
	}
	return out
}
