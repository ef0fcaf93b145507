package groupwatch

import (
	"encoding/binary"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// frames passes requests and their answers, encoded as on the wire, through the tap's
// reading of them (parseRequest, then answered), as one connection of instance.
type frames struct {
	t    *testing.T
	tap  *Tap
	conn *tapConn
	corr int32
}

func newFrames(t *testing.T, instance string) *frames {
	tap := NewTap("127.0.0.1:1", time.Now(), slog.New(slog.DiscardHandler))
	return &frames{t: t, tap: tap, conn: &tapConn{tap: tap, instance: instance, listenAddr: "127.0.0.1:2"}}
}

func (f *frames) exchange(req kmsg.Request, resp kmsg.Response) {
	f.t.Helper()
	f.corr++
	frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("test")).AppendRequest(nil, req, f.corr)
	parsed, err := parseRequest(frame)
	if err != nil {
		f.t.Fatalf("parse %T: %v", req, err)
	}
	answer := binary.BigEndian.AppendUint32(make([]byte, 4), uint32(f.corr))
	if req.IsFlexible() {
		answer = append(answer, 0) // no tagged fields in the answer header
	}
	resp.SetVersion(req.GetVersion())
	answer = resp.AppendTo(answer)
	binary.BigEndian.PutUint32(answer, uint32(len(answer)-4))
	f.tap.answered(f.conn, parsed, answer)
}

func heartbeat(f *frames, memberID string, reqEpoch, respEpoch int32, assigned map[[16]byte][]int32) {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Version, req.Group, req.MemberID, req.MemberEpoch = 1, "g", memberID, reqEpoch
	resp := kmsg.NewPtrConsumerGroupHeartbeatResponse()
	resp.MemberID, resp.MemberEpoch = &memberID, respEpoch
	if assigned != nil {
		resp.Assignment = &kmsg.ConsumerGroupHeartbeatResponseAssignment{}
		for id, partitions := range assigned {
			resp.Assignment.Topics = append(resp.Assignment.Topics, kmsg.ConsumerGroupHeartbeatResponseAssignmentTopic{TopicID: id, Partitions: partitions})
		}
	}
	f.exchange(req, resp)
}

func commit(f *frames, memberID string, epoch int32, topicID [16]byte, partition int32, offset int64) {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Version, req.Group, req.MemberID, req.Generation = 10, "g", memberID, epoch
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.TopicID = topicID
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = partition, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp := kmsg.NewPtrOffsetCommitResponse()
	st := kmsg.NewOffsetCommitResponseTopic()
	st.TopicID = topicID
	st.Partitions = append(st.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: partition})
	resp.Topics = append(resp.Topics, st)
	f.exchange(req, resp)
}

// A KIP-848 member's epochs and assignments come from heartbeat answers by topic id,
// named by an earlier Metadata answer; an answer without an assignment keeps the
// partitions, and a commit is judged by its member's partitions in its epoch.
func TestTapReadsConsumerGroupHeartbeats(t *testing.T) {
	t.Parallel()
	const topic = "payments"
	id := [16]byte{7, 7, 7}
	f := newFrames(t, "a")

	meta := kmsg.NewPtrMetadataResponse()
	mt := kmsg.NewMetadataResponseTopic()
	name := topic
	mt.Topic, mt.TopicID = &name, id
	meta.Topics = append(meta.Topics, mt)
	metaReq := kmsg.NewPtrMetadataRequest()
	metaReq.Version = 12
	f.exchange(metaReq, meta)

	heartbeat(f, "ma", 0, 1, map[[16]byte][]int32{id: {0, 1, 2}}) // joins with everything
	heartbeat(f, "ma", 1, 1, nil)                                 // nothing new: nothing kept
	commit(f, "ma", 1, id, 2, 10)                                 // its own
	heartbeat(f, "ma", 1, 1, map[[16]byte][]int32{id: {0, 1}})    // gives 2 up, same epoch
	commit(f, "ma", 1, id, 2, 11)                                 // the handover commit: its own
	heartbeat(f, "ma", 1, 2, nil)                                 // new epoch, same partitions
	commit(f, "ma", 2, id, 2, 12)                                 // 2 is no longer its own
	commit(f, "ma", 2, id, 1, 5)                                  // its own

	h := f.tap.History()
	gotJoins := []int32{}
	for _, j := range h.Joins {
		if j.Protocol != ProtocolConsumer || j.MemberID != "ma" || j.Instance != "a" {
			t.Errorf("join %+v: want member ma of instance a, protocol %q", j, ProtocolConsumer)
		}
		gotJoins = append(gotJoins, j.Generation)
	}
	if diff := cmp.Diff([]int32{1, 2}, gotJoins); diff != "" {
		t.Errorf("epochs joined (-want +got):\n%s", diff)
	}
	var gotAssigned [][]int32
	for _, a := range h.Assignments {
		if !a.MemberEpoch {
			t.Errorf("assignment %+v: want MemberEpoch", a)
		}
		gotAssigned = append(gotAssigned, a.Partitions[topic])
	}
	if diff := cmp.Diff([][]int32{{0, 1, 2}, {0, 1}, {0, 1}}, gotAssigned); diff != "" {
		t.Errorf("assignments by topic name (-want +got):\n%s", diff)
	}
	got := h.NonOwnerCommits(topic)
	if got.Judged != 4 || got.Unjudged != 0 {
		t.Fatalf("judged %d, unjudged %d: want 4 and 0", got.Judged, got.Unjudged)
	}
	if len(got.NonOwner) != 1 || got.NonOwner[0].Partition != 2 || got.NonOwner[0].Offset != 12 {
		t.Fatalf("non-owner commits: got %+v, want the commit of partition 2 at offset 12 in epoch 2", got.NonOwner)
	}
}

// A leave ends the member's epochs; a rejoin under a new member id starts afresh, and
// a commit of an epoch the tap never saw assigned is left unjudged.
func TestTapForgetsAConsumerGroupMemberThatLeft(t *testing.T) {
	t.Parallel()
	id := [16]byte{1}
	f := newFrames(t, "a")
	heartbeat(f, "m1", 0, 3, map[[16]byte][]int32{id: {0}})
	heartbeat(f, "m1", -1, -1, nil)
	heartbeat(f, "m2", 0, 5, nil) // no assignment yet: nothing to carry
	heartbeat(f, "m2", 5, 5, map[[16]byte][]int32{id: {1}})
	commit(f, "m2", 4, id, 1, 1)
	h := f.tap.History()
	if len(h.Joins) != 2 || h.Joins[1].MemberID != "m2" || h.Joins[1].Generation != 5 {
		t.Fatalf("joins: got %+v, want m1 at epoch 3, then m2 at epoch 5", h.Joins)
	}
	if got := h.NonOwnerCommits(hexID(id)); got.Judged != 0 || got.Unjudged != 1 {
		t.Fatalf("commit of an unseen epoch: got %+v, want it unjudged", got)
	}
}

func hexID(id [16]byte) string {
	f := &Tap{topicNames: map[[16]byte]string{}}
	return f.topicName(id)
}
