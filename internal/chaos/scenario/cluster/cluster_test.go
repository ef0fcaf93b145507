package cluster

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// wantRows fails the test unless exactly the rows named in failing failed.
func wantRows(t *testing.T, checks []verdict.Check, failing ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, name := range failing {
		want[name] = true
	}
	for _, c := range checks {
		if c.OK == want[c.Name] {
			t.Errorf("row %q: ok = %t (got %s, want %s)", c.Name, c.OK, c.Got, c.Want)
		}
		delete(want, c.Name)
	}
	for name := range want {
		t.Errorf("no row %q", name)
	}
}

// offlineRun is a partition-offline run: one payment a second from 0 s to 40 s, spread
// over partitions 0, 1 and 2 in turn; the relay cut from partition 2's leader from 10 s to
// 30 s. publish says when each event reached the topic.
func offlineRun(publish func(accepted float64, partition int32) float64) *verdict.Report {
	ev := &verdict.Evidence{LoadStartS: 0, LoadEndS: 40, AcceptedS: map[string]float64{}, FirstSeenS: map[string]float64{}, Partition: map[string]int32{}}
	for i := range 40 {
		id := fmt.Sprint("p", i)
		p := int32(i % 3)
		ev.AcceptedS[id], ev.Partition[id] = float64(i), p
		ev.FirstSeenS[id] = publish(float64(i), p)
	}
	return &verdict.Report{Evidence: ev, FaultWindows: []faults.Window{{Kind: faults.ProxyDown, StartS: 10, EndS: 30}}, Cluster: &faults.ClusterEvidence{}}
}

func TestPartitionOfflineRows(t *testing.T) {
	t.Parallel()
	const (
		held    = "events of the cut partitions accepted during the cut and held back by it"
		leader  = "the cut partitions kept their leader (a cut, not a failover)"
		healthy = "other partitions' events reaching the topic during the cut, per second, against before it"
	)
	cutHolds := func(accepted float64, p int32) float64 {
		if p == 2 && accepted >= 10 && accepted < 30 {
			return 31 // published when the cut ends
		}
		return accepted + 0.01
	}
	headOfLine := func(accepted float64, p int32) float64 {
		if accepted >= 10 && accepted < 30 {
			return 31 // every partition waits for the cut one
		}
		return accepted + 0.01
	}
	noCut := func(accepted float64, _ int32) float64 { return accepted + 0.01 }
	tests := []struct {
		name    string
		publish func(float64, int32) float64
		moved   bool
		failing []string
	}{
		{"the cut bites, the others flow", cutHolds, false, nil},
		{"head-of-line blocking", headOfLine, false, []string{healthy}},
		{"the cut did not bite", noCut, false, []string{held}},
		{"a failover instead of a cut", cutHolds, true, []string{leader}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := offlineRun(tt.publish)
			if tt.moved {
				r.Cluster.LeaderChanges = []faults.LeaderChange{{AtS: 15, Partition: 2, From: 1, To: 2}}
			}
			o := &partitionOffline{For: 20 * time.Second}
			o.cut.broker, o.cut.partitions = 1, []int32{2}
			wantRows(t, o.validity(r, nil), tt.failing...)
		})
	}
}

func TestBrokerFailoverRows(t *testing.T) {
	t.Parallel()
	const (
		restarted = "brokers SIGKILLed and restarted by the harness"
		moved     = "partitions of the killed brokers got a new leader (harness's metadata, DIRECT)"
		written   = "events written to a partition while its old leader was dead (the relay found the new leader)"
		coord     = "the consumer group's coordinator among the brokers killed"
		commits   = "offsets the group committed after its coordinator was killed (the consumer found the new one)"
	)
	// Broker 1 (leader of partition 0) killed at 5 s, back at 25 s; broker 2 (leader of
	// partition 1, the coordinator) killed at 40 s, back at 60 s.
	run := func() *verdict.Report {
		ev := &faults.ClusterEvidence{
			Brokers: []faults.BrokerAction{
				{AtS: 5, Node: 1, Action: "SIGKILL", Led: []int32{0}},
				{AtS: 25, Node: 1, Action: "started"},
				{AtS: 40, Node: 2, Action: "SIGKILL", Led: []int32{1}, Coordinator: true},
				{AtS: 60, Node: 2, Action: "started"},
			},
			LeaderChanges: []faults.LeaderChange{{AtS: 11, Partition: 0, From: 1, To: 3}, {AtS: 46, Partition: 1, From: 2, To: 3}},
			Committed:     []faults.CommitSample{{AtS: 39, Sum: 50}, {AtS: 70, Sum: 90}},
		}
		e := &verdict.Evidence{FirstSeenS: map[string]float64{"a": 12, "b": 50}, Partition: map[string]int32{"a": 0, "b": 1}}
		return &verdict.Report{Cluster: ev, Evidence: e, DurationSeconds: 100}
	}
	tests := []struct {
		name    string
		breakIt func(r *verdict.Report)
		failing []string
	}{
		{"both kills followed", func(*verdict.Report) {}, nil},
		{"second broker never restarted", func(r *verdict.Report) { r.Cluster.Brokers = r.Cluster.Brokers[:3] }, []string{restarted}},
		{"no new leader for partition 1", func(r *verdict.Report) { r.Cluster.LeaderChanges = r.Cluster.LeaderChanges[:1] }, []string{moved}},
		{"nothing written while a leader was dead", func(r *verdict.Report) { r.Evidence.FirstSeenS = map[string]float64{"a": 30, "b": 65} }, []string{written}},
		{"coordinator never killed", func(r *verdict.Report) { r.Cluster.Brokers[2].Coordinator = false }, []string{coord, commits}},
		{"no commit after the coordinator died", func(r *verdict.Report) { r.Cluster.Committed[1].Sum = 50 }, []string{commits}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := run()
			tt.breakIt(r)
			wantRows(t, brokerFailover{}.validity(r, nil), tt.failing...)
		})
	}
}

func TestRollingRestartRows(t *testing.T) {
	t.Parallel()
	const oneAtATime = "brokers restarted one at a time (SIGTERM, start, back in sync before the next)"
	restarts := func(stop2 float64) *verdict.Report {
		var actions []faults.BrokerAction
		for node, at := range map[int32]float64{1: 5, 2: stop2, 3: 80} {
			actions = append(actions,
				faults.BrokerAction{AtS: at, Node: node, Action: "SIGTERM"},
				faults.BrokerAction{AtS: at + 10, Node: node, Action: "started"},
				faults.BrokerAction{AtS: at + 15, Node: node, Action: "in sync"})
		}
		slices.SortFunc(actions, func(a, b faults.BrokerAction) int { return cmp.Compare(a.AtS, b.AtS) })
		return &verdict.Report{Cluster: &faults.ClusterEvidence{Brokers: actions, LeaderChanges: []faults.LeaderChange{{AtS: 6, Partition: 0, From: 1, To: 2}}}}
	}
	rn := &harness.Run{LoadEndS: 100}
	wantRows(t, rollingRestart{}.validity(restarts(40), rn))
	// Broker 2 stopped at 12 s, before broker 1 was back in sync at 20 s.
	wantRows(t, rollingRestart{}.validity(restarts(12), rn), oneAtATime)
	// The load ended at 60 s, before broker 3 was stopped at 80 s.
	wantRows(t, rollingRestart{}.validity(restarts(40), &harness.Run{LoadEndS: 60}), "brokers stopped while payments were arriving")
	rejected := restarts(40)
	rejected.APIRejected = 1
	wantRows(t, rollingRestart{}.validity(rejected, rn), "payments the API refused during the restarts")
}
