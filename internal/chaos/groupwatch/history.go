package groupwatch

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// History is what the tap saw of the group protocol, in the order it passed. Times
// are seconds since the run's origin.
type History struct {
	Joins       []Join
	Assignments []Assignment
	Commits     []Commit
}

// A Join is an accepted JoinGroup, or under the consumer protocol a heartbeat answer
// with a new member epoch: the member id and generation (epoch) an instance holds from
// then on.
type Join struct {
	AtS        float64
	Instance   string
	MemberID   string
	Generation int32
	// Protocol is how the member joined: the classic balancer the group chose
	// ("sticky" and "range" are eager, "cooperative-sticky" is cooperative), or
	// ProtocolConsumer for KIP-848.
	Protocol string
}

// An Assignment is what a member was given in a generation (its SyncGroup answer):
// the partitions it owns until the next one. Under KIP-848 it is a heartbeat answer's,
// and a member may get several in one epoch (it gives partitions up before its epoch
// is bumped).
type Assignment struct {
	AtS        float64
	Instance   string
	MemberID   string
	Generation int32
	// MemberEpoch marks a KIP-848 assignment: Generation is then the member's own
	// epoch, not the group's generation.
	MemberEpoch bool
	// Partitions are per topic; an empty map is a member given nothing.
	Partitions map[string][]int32
}

// A Commit is one partition of one OffsetCommit request, with the broker's answer.
type Commit struct {
	SentAtS, AnsweredAtS float64
	Instance             string
	MemberID             string
	Generation           int32
	// Topic is the topic's name, also when the request named it by id (OffsetCommit
	// v10+), if a Metadata answer had named that id; otherwise the id in hex.
	Topic     string
	Partition int32
	Offset    int64
	// ErrorCode is the broker's answer for this partition: 0 accepted, otherwise
	// refused (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS ...).
	ErrorCode int16
}

// Accepted reports whether the broker stored the commit.
func (c Commit) Accepted() bool { return c.ErrorCode == 0 }

func (h History) clone() History {
	return History{Joins: slices.Clone(h.Joins), Assignments: slices.Clone(h.Assignments), Commits: slices.Clone(h.Commits)}
}

// recordJoin keeps an accepted JoinGroup answer.
func (t *Tap) recordJoin(instance string, resp *kmsg.JoinGroupResponse) {
	if resp.ErrorCode != 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var protocol string
	if resp.Protocol != nil {
		protocol = *resp.Protocol
	}
	t.history.Joins = append(t.history.Joins, Join{AtS: t.since(), Instance: instance, MemberID: resp.MemberID, Generation: resp.Generation, Protocol: protocol})
}

// recordSync keeps an accepted SyncGroup answer with the partitions it assigns.
func (t *Tap) recordSync(instance string, req *kmsg.SyncGroupRequest, resp *kmsg.SyncGroupResponse) {
	if resp.ErrorCode != 0 {
		return
	}
	partitions := map[string][]int32{}
	if len(resp.MemberAssignment) > 0 {
		var assigned kmsg.ConsumerMemberAssignment
		if err := assigned.ReadFrom(resp.MemberAssignment); err != nil {
			return // not the consumer protocol
		}
		for _, topic := range assigned.Topics {
			partitions[topic.Topic] = append(partitions[topic.Topic], topic.Partitions...)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.history.Assignments = append(t.history.Assignments, Assignment{AtS: t.since(), Instance: instance, MemberID: req.MemberID, Generation: req.Generation, Partitions: partitions})
}

// recordCommit keeps every partition of an OffsetCommit with the broker's answer. The
// answer lists the request's topics and partitions in the request's order.
func (t *Tap) recordCommit(instance string, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, sentAtS float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	answeredAtS := t.since()
	for i, topic := range req.Topics {
		name := topic.Topic
		if req.Version >= 10 {
			name = t.topicName(topic.TopicID)
		}
		for j, p := range topic.Partitions {
			code := int16(-1) // no answer for it: counted as refused
			if i < len(resp.Topics) && j < len(resp.Topics[i].Partitions) && resp.Topics[i].Partitions[j].Partition == p.Partition {
				code = resp.Topics[i].Partitions[j].ErrorCode
			}
			t.history.Commits = append(t.history.Commits, Commit{
				SentAtS: sentAtS, AnsweredAtS: answeredAtS, Instance: instance, MemberID: req.MemberID, Generation: req.Generation,
				Topic: name, Partition: p.Partition, Offset: p.Offset, ErrorCode: code,
			})
		}
	}
}
