package devstack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The three-node cluster of `KAFKA_NODES=3 scripts/stack/kafka.sh start`
// (scripts/stack/kafka-cluster.sh). It runs beside the single broker, on ports of its
// own counted from Ports.ClusterBase (by default 21190, below Linux's ephemeral range).
// Node n (1 to 3) listens on DIRECT ClusterBase+n and advertises its PROXIED listener
// as ClusterBase+200+n, where the Toxiproxy proxy kafka_cluster_n forwards from, so a
// fault can hit one broker, and only for the relay.
const (
	// ClusterNodes is the cluster's size; node ids are 1 to ClusterNodes.
	ClusterNodes = 3
	// ClusterReplicationFactor and ClusterMinInsyncReplicas are what every topic on the
	// cluster gets by default (cluster.properties.tmpl): three copies, two of which
	// must take a write under acks=all.
	ClusterReplicationFactor = 3
	ClusterMinInsyncReplicas = 2
)

// ClusterDirectBroker is node n's DIRECT listener, never behind a proxy.
func (p Ports) ClusterDirectBroker(node int32) string { return addr(p.ClusterBase + int(node)) }

// ClusterProxiedBroker is the Toxiproxy proxy ClusterProxy(node) in front of node n's
// PROXIED listener, which advertises this address.
func (p Ports) ClusterProxiedBroker(node int32) string {
	return addr(p.ClusterBase + 200 + int(node))
}

// ClusterProxy names the Toxiproxy proxy in front of node n.
func ClusterProxy(node int32) string { return "kafka_cluster_" + strconv.Itoa(int(node)) }

// ClusterBrokers lists every node's DIRECT listener: the seeds of the consumer, the
// verifier and every admin request on the cluster.
func (p Ports) ClusterBrokers() []string { return clusterList(p.ClusterDirectBroker) }

// ClusterProxiedBrokers lists every node's proxy: the relay's seeds under chaos.
func (p Ports) ClusterProxiedBrokers() []string { return clusterList(p.ClusterProxiedBroker) }

func clusterList(addr func(int32) string) []string {
	var out []string
	for n := int32(1); n <= ClusterNodes; n++ {
		out = append(out, addr(n))
	}
	return out
}

// ClusterScript runs "KAFKA_NODES=3 scripts/stack/kafka.sh <args...>" of the repository
// at root: start, stop, status, kill-node n, stop-node n, start-node n.
func ClusterScript(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "scripts", "stack", "kafka.sh")}, args...)...)
	cmd.Env = append(os.Environ(), "KAFKA_NODES=3")
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		return text, fmt.Errorf("run KAFKA_NODES=3 scripts/stack/kafka.sh %s: %w\n%s", strings.Join(args, " "), err, text)
	}
	return text, nil
}

// ClusterUp reports whether all ClusterNodes brokers of the cluster on these ports are
// registered, as the cluster's own metadata says; the error says what is missing.
func (p Ports) ClusterUp(ctx context.Context) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.ClusterBrokers()...))
	if err != nil {
		return fmt.Errorf("new Kafka client: %w", err)
	}
	defer cl.Close()
	meta, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("three-node cluster not reachable at %s (start it with KAFKA_NODES=3 scripts/stack/kafka.sh start): %w", strings.Join(p.ClusterBrokers(), ","), err)
	}
	if n := len(meta.Brokers); n != ClusterNodes {
		return fmt.Errorf("three-node cluster has %d brokers registered, want %d", n, ClusterNodes)
	}
	return nil
}
