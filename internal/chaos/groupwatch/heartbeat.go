package groupwatch

import (
	"encoding/hex"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// KIP-848's consumer group protocol has no JoinGroup and no SyncGroup: a member
// heartbeats (ConsumerGroupHeartbeat) with a member id it made up and its member epoch,
// and the broker answers with its new epoch and, when it changed, its assignment, by
// topic id. Each member has an epoch of its own, and an OffsetCommit carries it where
// the classic protocol carries the generation. The tap reads the heartbeat answers
// into the same History: a Join per epoch a member is given, an Assignment per change
// of epoch or partitions, marked MemberEpoch.

// ProtocolConsumer is the Protocol of a join through KIP-848's heartbeat.
const ProtocolConsumer = "consumer"

// memberState is what the tap last saw an instance hold under the consumer protocol.
type memberState struct {
	memberID   string
	epoch      int32
	partitions map[string][]int32
}

// recordHeartbeat keeps an accepted ConsumerGroupHeartbeat answer: a Join when the
// member's epoch changed, an Assignment when its epoch or its partitions did. An answer
// without an assignment leaves the partitions as they were; a leave (epoch below 0)
// ends the member's epochs.
func (t *Tap) recordHeartbeat(instance string, req *kmsg.ConsumerGroupHeartbeatRequest, resp *kmsg.ConsumerGroupHeartbeatResponse) {
	if resp.ErrorCode != 0 {
		return
	}
	memberID := req.MemberID
	if resp.MemberID != nil && *resp.MemberID != "" {
		memberID = *resp.MemberID
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	last, known := t.members[instance]
	if resp.MemberEpoch < 0 || req.MemberEpoch < 0 {
		delete(t.members, instance)
		return
	}
	if known && last.memberID != memberID {
		known = false // a new member id: nothing carries over
	}
	partitions := last.partitions
	if resp.Assignment != nil {
		partitions = map[string][]int32{}
		for _, topic := range resp.Assignment.Topics {
			name := t.topicName(topic.TopicID)
			partitions[name] = append(partitions[name], topic.Partitions...)
		}
	} else if !known {
		return // no assignment yet to carry
	}
	newEpoch := !known || last.epoch != resp.MemberEpoch
	if !newEpoch && samePartitions(last.partitions, partitions) {
		return
	}
	now := t.since()
	if newEpoch {
		t.history.Joins = append(t.history.Joins, Join{AtS: now, Instance: instance, MemberID: memberID, Generation: resp.MemberEpoch, Protocol: ProtocolConsumer})
	}
	t.history.Assignments = append(t.history.Assignments, Assignment{AtS: now, Instance: instance, MemberID: memberID, Generation: resp.MemberEpoch, MemberEpoch: true, Partitions: partitions})
	t.members[instance] = memberState{memberID: memberID, epoch: resp.MemberEpoch, partitions: partitions}
}

// recordTopicIDs keeps the topic names a Metadata answer gives for topic ids, which
// heartbeat answers and OffsetCommit v10+ use instead of names.
func (t *Tap) recordTopicIDs(resp *kmsg.MetadataResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, topic := range resp.Topics {
		if topic.Topic != nil && topic.TopicID != ([16]byte{}) {
			t.topicNames[topic.TopicID] = *topic.Topic
		}
	}
}

// topicName is the name of a topic id, or the id in hex if no Metadata answer has
// named it yet. The caller holds t.mu.
func (t *Tap) topicName(id [16]byte) string {
	if name, ok := t.topicNames[id]; ok {
		return name
	}
	return hex.EncodeToString(id[:])
}

func samePartitions(a, b map[string][]int32) bool {
	return maps.EqualFunc(a, b, func(x, y []int32) bool {
		return slices.Equal(slices.Sorted(slices.Values(x)), slices.Sorted(slices.Values(y)))
	})
}
