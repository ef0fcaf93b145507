package faults

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ClusterWatch follows the three-node cluster from outside, on the DIRECT listeners,
// several times a second: which broker leads each partition of the run's topic and which
// replicas are in sync, which broker coordinates the run's consumer group, and how far
// the group has committed. The cluster scenarios aim their kills with it and their
// validity rows read what it recorded, never the services' own view.
type ClusterWatch struct {
	adm    *kadm.Client
	client *kgo.Client
	topic  string
	group  string
	origin time.Time
	logger *slog.Logger
	stop   func()

	mu    sync.Mutex
	state clusterState
	ev    ClusterEvidence
}

// clusterState is the cluster as the last poll saw it.
type clusterState struct {
	leaders     map[int32]int32   // partition -> leader (-1: none)
	inSync      map[int32][]int32 // partition -> in-sync replicas
	coordinator int32             // the group's coordinator, -1 before it is known
}

// ClusterEvidence is what the harness saw of the cluster during a cluster scenario.
type ClusterEvidence struct {
	// LeaderChanges lists every change of a partition's leader of the run's topic.
	LeaderChanges []LeaderChange `json:"leader_changes"`
	// CoordinatorChanges lists the brokers that coordinated the consumer group, in turn.
	CoordinatorChanges []CoordinatorChange `json:"coordinator_changes"`
	// Brokers lists what the harness did to the brokers, and when.
	Brokers []BrokerAction `json:"broker_actions"`
	// Committed samples the sum of the group's committed offsets over the run's topic,
	// each time it changed.
	Committed []CommitSample `json:"committed_offsets"`
}

// LeaderChange is one change of leader; To is -1 while the partition has none.
type LeaderChange struct {
	AtS       float64 `json:"at_s"`
	Partition int32   `json:"partition"`
	From      int32   `json:"from"`
	To        int32   `json:"to"`
}

// CoordinatorChange is the group's coordinator as first seen at AtS.
type CoordinatorChange struct {
	AtS    float64 `json:"at_s"`
	Broker int32   `json:"broker"`
}

// BrokerAction is one thing the harness did to a broker: "SIGKILL", "SIGTERM" (a
// controlled shutdown), "started" (answering again) or "in sync" (back in the ISR of
// every partition of the topic). Led and Coordinator are what the broker was just before
// a kill or stop.
type BrokerAction struct {
	AtS         float64 `json:"at_s"`
	Node        int32   `json:"node"`
	Action      string  `json:"action"`
	Led         []int32 `json:"led_partitions,omitempty"`
	Coordinator bool    `json:"coordinator,omitempty"`
}

// CommitSample is the group's committed offsets, summed over the topic's partitions.
type CommitSample struct {
	AtS float64 `json:"at_s"`
	Sum int64   `json:"sum"`
}

// ClusterPollInterval is how often the watch asks; leader elections take seconds.
const ClusterPollInterval = 250 * time.Millisecond

// StartClusterWatch polls the cluster of brokers until Evidence or Stop: the leaders
// and in-sync replicas of topic's partitions, group's coordinator and its commits.
func StartClusterWatch(ctx context.Context, brokers []string, topic, group string, origin time.Time, logger *slog.Logger) (*ClusterWatch, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RequestTimeoutOverhead(2*time.Second))
	if err != nil {
		return nil, fmt.Errorf("new Kafka client for the cluster watch: %w", err)
	}
	w := &ClusterWatch{
		adm: kadm.NewClient(cl), client: cl, topic: topic, group: group, origin: origin,
		logger: logger.With(slog.String("component", "cluster_watch")),
		state:  clusterState{leaders: map[int32]int32{}, inSync: map[int32][]int32{}, coordinator: -1},
	}
	w.poll(ctx)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(ClusterPollInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				w.poll(ctx)
			}
		}
	}()
	w.stop = sync.OnceFunc(func() {
		cancel()
		<-done
		cl.Close()
	})
	return w, nil
}

// poll reads the topic's partitions, the group's coordinator and its commits, each
// under a timeout of its own; what fails is skipped until the next poll.
func (w *ClusterWatch) poll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	now := time.Since(w.origin).Seconds()
	details, err := w.adm.ListTopics(ctx, w.topic)
	if err == nil {
		err = details.Error()
	}
	if err == nil {
		w.seePartitions(now, details[w.topic].Partitions)
	} else if ctx.Err() == nil {
		w.logger.Debug("list topic", slog.Any("err", err))
	}
	// Asked afresh every time: kgo keeps no cache for a FindCoordinator request sent
	// this way, so a coordinator that moved shows at the next poll.
	if c, ok := w.adm.FindGroupCoordinators(ctx, w.group)[w.group]; ok && c.Err == nil {
		w.seeCoordinator(now, c.NodeID)
	}
	if offsets, err := w.adm.FetchOffsets(ctx, w.group); err == nil {
		var sum int64
		offsets.Each(func(o kadm.OffsetResponse) {
			if o.Topic == w.topic && o.Err == nil && o.At > 0 {
				sum += o.At
			}
		})
		// Only changes are kept: the report stays short, and the last sample at or
		// before any instant is still the sum at that instant.
		w.mu.Lock()
		if n := len(w.ev.Committed); n == 0 || w.ev.Committed[n-1].Sum != sum {
			w.ev.Committed = append(w.ev.Committed, CommitSample{AtS: now, Sum: sum})
		}
		w.mu.Unlock()
	}
}

func (w *ClusterWatch) seePartitions(now float64, partitions kadm.PartitionDetails) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range partitions {
		leader := p.Leader
		if p.Err != nil {
			leader = -1 // e.g. LEADER_NOT_AVAILABLE while an election runs
		}
		if old, ok := w.state.leaders[p.Partition]; ok && old != leader {
			w.ev.LeaderChanges = append(w.ev.LeaderChanges, LeaderChange{AtS: now, Partition: p.Partition, From: old, To: leader})
			w.logger.Info("leader change", slog.Int("partition", int(p.Partition)), slog.Int("from", int(old)), slog.Int("to", int(leader)))
		}
		w.state.leaders[p.Partition] = leader
		w.state.inSync[p.Partition] = slices.Clone(p.ISR)
	}
}

func (w *ClusterWatch) seeCoordinator(now float64, node int32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if node != w.state.coordinator {
		w.state.coordinator = node
		w.ev.CoordinatorChanges = append(w.ev.CoordinatorChanges, CoordinatorChange{AtS: now, Broker: node})
	}
}

// Led returns the partitions node leads, sorted.
func (w *ClusterWatch) Led(node int32) []int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int32
	for p, l := range w.state.leaders {
		if l == node {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Coordinator returns the group's coordinator as last seen, -1 before it is known.
func (w *ClusterWatch) Coordinator() int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state.coordinator
}

// InSyncEverywhere reports whether node is in the ISR of every partition of the topic.
func (w *ClusterWatch) InSyncEverywhere(node int32) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.state.inSync) == 0 {
		return false
	}
	for _, isr := range w.state.inSync {
		if !slices.Contains(isr, node) {
			return false
		}
	}
	return true
}

// LeaderChanges returns the leader changes seen so far.
func (w *ClusterWatch) LeaderChanges() []LeaderChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ev.LeaderChanges)
}

// Record adds a broker action, with what the broker led and coordinated just before.
func (w *ClusterWatch) Record(node int32, action string) BrokerAction {
	a := BrokerAction{AtS: time.Since(w.origin).Seconds(), Node: node, Action: action}
	if action == "SIGKILL" || action == "SIGTERM" {
		a.Led, a.Coordinator = w.Led(node), w.Coordinator() == node
	}
	w.mu.Lock()
	w.ev.Brokers = append(w.ev.Brokers, a)
	w.mu.Unlock()
	return a
}

// Stop stops the watch; Evidence still returns what it saw.
func (w *ClusterWatch) Stop() { w.stop() }

// Evidence stops the watch and returns what it saw.
func (w *ClusterWatch) Evidence() *ClusterEvidence {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	ev := w.ev
	return &ev
}
