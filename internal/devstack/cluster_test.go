package devstack

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/event"
)

// TestClusterIsWhatItClaims checks the three-node cluster against what
// scripts/stack/kafka-cluster.sh says it is: three brokers, payments.events and any
// new topic with three replicas on three brokers and min.insync.replicas=2, unclean
// leader election off, and a write under acks=all taken. The cluster is started on
// demand only (it costs three JVMs), so without it the test is skipped, saying how to
// start it.
func TestClusterIsWhatItClaims(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ports, err := LoadPorts(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	probe, probeCancel := context.WithTimeout(ctx, 5*time.Second)
	defer probeCancel()
	if err := ports.ClusterUp(probe); err != nil {
		t.Skipf("three-node cluster not running, nothing to check (KAFKA_NODES=3 scripts/stack/kafka.sh start): %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(ports.ClusterBrokers()...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("broker metadata: %v", err)
	}
	var ids []int32
	for _, b := range meta.Brokers {
		ids = append(ids, b.NodeID)
		if want := ports.ClusterDirectBroker(b.NodeID); b.Host+":"+itoa(b.Port) != want {
			t.Errorf("broker %d on DIRECT advertises %s:%d, want %s", b.NodeID, b.Host, b.Port, want)
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []int32{1, 2, 3}) {
		t.Fatalf("brokers: got node ids %v, want [1 2 3]", ids)
	}

	name := UniqueName("cluster_check_")
	if err := CreateTopic(ctx, adm, name, 3); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = DeleteTopic(context.Background(), adm, name) })
	for _, topic := range []string{event.DefaultTopic, name} {
		checkReplication(ctx, t, adm, topic)
	}
	rec := &kgo.Record{Topic: name, Key: []byte("k"), Value: []byte("v")}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Errorf("produce with acks=all: %v", err)
	}
}

// checkReplication checks one topic's replicas, in-sync replicas and configs.
func checkReplication(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	details, err := adm.ListTopics(ctx, topic)
	if err == nil {
		err = details.Error()
	}
	if err != nil {
		t.Fatalf("list topic %s: %v", topic, err)
	}
	for _, p := range details[topic].Partitions.Sorted() {
		if len(p.Replicas) != ClusterReplicationFactor || len(p.ISR) != ClusterReplicationFactor {
			t.Errorf("%s/%d: replicas %v, in sync %v; want %d of each", topic, p.Partition, p.Replicas, p.ISR, ClusterReplicationFactor)
		}
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("describe configs of %s: %v", topic, err)
	}
	rc, err := configs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		t.Fatalf("configs of %s: %v", topic, err)
	}
	want := map[string]string{"min.insync.replicas": itoa(ClusterMinInsyncReplicas), "unclean.leader.election.enable": "false"}
	for _, c := range rc.Configs {
		if w, ok := want[c.Key]; ok {
			if got := c.MaybeValue(); got != w {
				t.Errorf("%s: %s = %q, want %q", topic, c.Key, got, w)
			}
			delete(want, c.Key)
		}
	}
	for key := range want {
		t.Errorf("%s: no config %s", topic, key)
	}
}

func itoa[N int | int32](n N) string { return strconv.Itoa(int(n)) }
