package relay

// The relay against the three-node cluster, beside the single broker, in the
// same run: KAFKA_CLUSTER_BROKERS names the cluster's brokers (make bench sets it when
// `KAFKA_NODES=3 scripts/stack/kafka.sh status` answers). Topics created there get the
// cluster's defaults, three replicas and min.insync.replicas=2, and the relay always
// produces with acks=all, so every record waits for a second copy before it counts:
// the price of replication, on the same machine and database as the single broker's
// figures.

import (
	"context"
	"fmt"
	"strings"

	"github.com/dscourse/payments-outbox/internal/bench/measure"

	"github.com/dscourse/payments-outbox/internal/benchreport"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// clusterBench is the relay benchmark pointed at the cluster: the same databases and
// relay settings, another Kafka.
type clusterBench struct {
	relayBench
	close func()
}

// newClusterBench returns the cluster's bench, or nil when KAFKA_CLUSTER_BROKERS is
// unset. The cluster's brokers must answer: a name without a cluster is an error, not a
// silent skip.
func newClusterBench(ctx context.Context, b relayBench, getenv func(string) string) (*clusterBench, error) {
	env := getenv("KAFKA_CLUSTER_BROKERS")
	if env == "" {
		return nil, nil
	}
	var brokers []string
	for s := range strings.SplitSeq(env, ",") {
		if s = strings.TrimSpace(s); s != "" {
			brokers = append(brokers, s)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, fmt.Errorf("new Kafka client for KAFKA_CLUSTER_BROKERS: %w", err)
	}
	adm := kadm.NewClient(cl)
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("KAFKA_CLUSTER_BROKERS=%s does not answer (start it: KAFKA_NODES=3 scripts/stack/kafka.sh start): %w", env, err)
	}
	if len(meta.Brokers) < 3 {
		cl.Close()
		return nil, fmt.Errorf("KAFKA_CLUSTER_BROKERS=%s: %d brokers registered, want 3 for replication factor 3", env, len(meta.Brokers))
	}
	c := &clusterBench{relayBench: b, close: cl.Close}
	c.Kafka, c.Adm, c.Brokers, c.claims, c.Tracer = cl, adm, brokers, nil, nil
	c.ours.Config.Brokers = brokers
	return c, nil
}

// clusterFigures are one repetition's measurements on the cluster.
type clusterFigures struct {
	drain   measure.DrainResult
	latency measure.LatencyResult
}

// repetition measures our relay's drain and latency on the cluster once.
func (c *clusterBench) repetition(ctx context.Context) (*clusterFigures, error) {
	var f clusterFigures
	var err error
	if f.drain, err = c.Drain(ctx, c.ours, c.ourURL, nil); err != nil {
		return nil, fmt.Errorf("our relay's drain on the cluster: %w", err)
	}
	if f.latency, err = c.Latency(ctx, c.ours, c.ourURL); err != nil {
		return nil, fmt.Errorf("our relay's latency on the cluster: %w", err)
	}
	return &f, nil
}

// addClusterFigures puts the cluster's medians, with their spread, into the report,
// when every repetition measured them.
func addClusterFigures(report map[string]any, all []relayFigures) {
	var drain, p50, p99, rate benchreport.Samples
	for _, f := range all {
		if f.cluster == nil {
			return
		}
		drain = append(drain, f.cluster.drain.EventsPerSecond)
		p50 = append(p50, f.cluster.latency.P50)
		p99 = append(p99, f.cluster.latency.P99)
		rate = append(rate, f.cluster.latency.AchievedRate)
	}
	drain.AddTo(report, "relay_drain_cluster_events_per_s", benchreport.Tenths)
	p50.AddTo(report, "relay_latency_cluster_p50_ms", benchreport.Tenths)
	p99.AddTo(report, "relay_latency_cluster_p99_ms", benchreport.Tenths)
	// A machine too busy to commit at the asked rate measures a lower one: say which.
	rate.AddTo(report, "relay_latency_cluster_rate_per_s", benchreport.Tenths)
	report["relay_cluster_note"] = "the same relay and database against the three-node cluster of KAFKA_NODES=3 scripts/stack/kafka.sh " +
		"(replication factor 3, min.insync.replicas=2, acks=all), measured in each repetition right after the single broker's figures"
}
