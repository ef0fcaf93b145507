package groupwatch

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ViewEvery is how often a View describes the group: a rebalance of a local group
// takes a few hundred milliseconds, so each one shows in a few samples.
const ViewEvery = 100 * time.Millisecond

// A View follows the consumer group from outside, as an operator's tool would: it
// describes the group (DescribeGroups, or ConsumerGroupDescribe for a KIP-848 group) and reads its committed and end offsets every
// ViewEvery, and keeps the samples in which the members or their partitions changed.
// It is the harness's own view, independent of what the consumers or the tap say;
// what happened between two samples it cannot see. It owns one goroutine, which Stop
// ends.
type View struct {
	adm    *kadm.Client
	client *kgo.Client
	topic  string
	group  string
	origin time.Time
	logger *slog.Logger
	stop   context.CancelFunc
	done   chan struct{}
	// consumerProtocol is whether the group answered as a KIP-848 one last time
	// (describeMembers); only the view's goroutine uses it.
	consumerProtocol bool

	mu      sync.Mutex
	samples []ViewSample
}

// A ViewSample is the group as one description saw it.
type ViewSample struct {
	AtS   float64
	State string
	// Owners maps each assigned partition of the topic to its member id.
	Owners map[int32]string
	// Members are the member ids, sorted, assigned or not.
	Members []string
	// InFlight is, per partition, the records past the group's committed offset when
	// the sample was taken (end offset minus committed offset).
	InFlight map[int32]int64
}

// StartView starts describing group every ViewEvery until Stop.
func StartView(ctx context.Context, client *kgo.Client, topic, group string, origin time.Time, logger *slog.Logger) *View {
	ctx, cancel := context.WithCancel(ctx)
	v := &View{adm: kadm.NewClient(client), client: client, topic: topic, group: group, origin: origin,
		logger: logger.With(slog.String("component", "group_view")), stop: cancel, done: make(chan struct{})}
	go v.loop(ctx)
	return v
}

// Stop ends the view and returns the samples in which the group changed.
func (v *View) Stop() []ViewSample {
	v.stop()
	<-v.done
	return v.Samples()
}

// Samples returns the changes seen so far.
func (v *View) Samples() []ViewSample {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.samples)
}

func (v *View) loop(ctx context.Context) {
	defer close(v.done)
	ticker := time.NewTicker(ViewEvery)
	defer ticker.Stop()
	for {
		if s, ok := v.describe(ctx); ok {
			v.keepIfChanged(s)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// describe takes one sample; false when the broker did not answer in time.
func (v *View) describe(ctx context.Context) (ViewSample, bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := v.describeMembers(ctx)
	if err != nil {
		if ctx.Err() == nil {
			v.logger.Debug("describe group", slog.Any("err", err))
		}
		return ViewSample{}, false
	}
	slices.Sort(s.Members)
	ends, err := v.adm.ListEndOffsets(ctx, v.topic)
	if err != nil {
		return s, true
	}
	committed, err := v.adm.FetchOffsets(ctx, v.group)
	if err != nil {
		return s, true
	}
	ends.Each(func(end kadm.ListedOffset) {
		at := int64(0)
		if c, ok := committed.Lookup(v.topic, end.Partition); ok && c.At >= 0 {
			at = c.At
		}
		s.InFlight[end.Partition] = max(0, end.Offset-at)
	})
	return s, true
}

// describeMembers reads the group's state, members and owners. A KIP-848 group is not
// a classic one to DescribeGroups (GROUP_ID_NOT_FOUND, "not a classic group"), and a
// classic one is unknown to ConsumerGroupDescribe: the view asks the other way when
// one says so, and keeps to the way that answered. ConsumerGroupDescribe's states read
// the same (Stable once every member has reconciled its assignment).
func (v *View) describeMembers(ctx context.Context) (ViewSample, error) {
	s, err := v.describeAs(ctx, v.consumerProtocol)
	if errors.Is(err, kerr.GroupIDNotFound) {
		if other, otherErr := v.describeAs(ctx, !v.consumerProtocol); otherErr == nil {
			v.consumerProtocol = !v.consumerProtocol
			return other, nil
		}
	}
	return s, err
}

// describeAs describes the group with DescribeGroups, or with ConsumerGroupDescribe.
func (v *View) describeAs(ctx context.Context, consumerProtocol bool) (ViewSample, error) {
	s := ViewSample{AtS: time.Since(v.origin).Seconds(), Owners: map[int32]string{}, InFlight: map[int32]int64{}}
	if consumerProtocol {
		groups, err := v.adm.DescribeConsumerGroups(ctx, v.group)
		if err != nil {
			return s, err
		}
		g := groups[v.group]
		if g.Err != nil {
			return s, g.Err
		}
		s.State = g.State
		for _, m := range g.Members {
			s.Members = append(s.Members, m.MemberID)
			for p := range m.Assignment[v.topic] {
				s.Owners[p] = m.MemberID
			}
		}
		return s, nil
	}
	groups, err := v.adm.DescribeGroups(ctx, v.group)
	if err != nil {
		return s, err
	}
	g := groups[v.group]
	if g.Err != nil {
		return s, g.Err
	}
	s.State = g.State
	for _, m := range g.Members {
		s.Members = append(s.Members, m.MemberID)
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range c.Topics {
				if t.Topic == v.topic {
					for _, p := range t.Partitions {
						s.Owners[p] = m.MemberID
					}
				}
			}
		}
	}
	return s, nil
}

// keepIfChanged keeps a sample whose state, members or owners differ from the last
// one kept.
func (v *View) keepIfChanged(s ViewSample) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if n := len(v.samples); n > 0 {
		last := v.samples[n-1]
		if last.State == s.State && slices.Equal(last.Members, s.Members) && maps.Equal(last.Owners, s.Owners) {
			return
		}
	}
	v.samples = append(v.samples, s)
}

// A Move is a partition given to another member than its last owner.
type Move struct {
	AtS       float64
	Partition int32
	From, To  string // member ids
	// InFlight is the most records past the committed offset that any sample saw
	// between the last one that showed the old owner and the first that showed the
	// new one: records that were there to be processed while the partition moved.
	InFlight int64
}

// Rebalances counts the stable assignments after the first: each is one completed
// rebalance that the view saw (several in quick succession can look like one).
func Rebalances(samples []ViewSample) int {
	n := 0
	var last *ViewSample
	for i, s := range samples {
		if s.State != "Stable" {
			continue
		}
		if last != nil && (!slices.Equal(last.Members, s.Members) || !maps.Equal(last.Owners, s.Owners)) {
			n++
		}
		last = &samples[i]
	}
	return n
}

// Moves lists the partitions that a stable sample shows with another owner than the
// last one a stable sample showed. A partition that the cooperative protocol leaves
// unassigned for a generation while it is handed over is a move from its old owner to
// its new one.
func Moves(samples []ViewSample) []Move {
	var moves []Move
	owners := map[int32]string{}
	inFlight := map[int32]int64{}
	for _, s := range samples {
		for p, n := range s.InFlight {
			inFlight[p] = max(inFlight[p], n)
		}
		if s.State != "Stable" {
			continue
		}
		for _, p := range slices.Sorted(maps.Keys(s.Owners)) {
			to := s.Owners[p]
			if from, ok := owners[p]; ok && from != to {
				moves = append(moves, Move{AtS: s.AtS, Partition: p, From: from, To: to, InFlight: inFlight[p]})
			}
			owners[p] = to
			inFlight[p] = s.InFlight[p]
		}
	}
	return moves
}
