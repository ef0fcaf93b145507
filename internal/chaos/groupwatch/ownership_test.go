package groupwatch

import "testing"

// The cooperative handover: a gives partition 0 up in generation 2 (nobody has it) and
// b gets it in generation 3. a's commit in generation 2 is its own; in generation 3 it
// is a non-owner's.
func TestNonOwnerCommitsAcrossACooperativeHandover(t *testing.T) {
	t.Parallel()
	const topic = "t"
	h := History{
		Assignments: []Assignment{
			{Instance: "a", MemberID: "ma", Generation: 1, Partitions: map[string][]int32{topic: {0, 1}}},
			{Instance: "a", MemberID: "ma", Generation: 2, Partitions: map[string][]int32{topic: {1}}},
			{Instance: "b", MemberID: "mb", Generation: 2, Partitions: map[string][]int32{}},
			{Instance: "a", MemberID: "ma", Generation: 3, Partitions: map[string][]int32{topic: {1}}},
			{Instance: "b", MemberID: "mb", Generation: 3, Partitions: map[string][]int32{topic: {0}}},
		},
		Commits: []Commit{
			{Instance: "a", MemberID: "ma", Generation: 1, Topic: topic, Partition: 0},
			{Instance: "a", MemberID: "ma", Generation: 2, Topic: topic, Partition: 0},
			{Instance: "b", MemberID: "mb", Generation: 3, Topic: topic, Partition: 0},
			{Instance: "a", MemberID: "ma", Generation: 3, Topic: topic, Partition: 0},
			{Instance: "a", MemberID: "ma", Generation: 3, Topic: topic, Partition: 0, ErrorCode: 22}, // refused: not judged
			{Instance: "a", MemberID: "ma", Generation: 9, Topic: topic, Partition: 1},                // generation never seen
		},
	}
	got := h.NonOwnerCommits(topic)
	if got.Judged != 4 || got.Unjudged != 1 {
		t.Fatalf("judged %d, unjudged %d: want 4 and 1", got.Judged, got.Unjudged)
	}
	if len(got.NonOwner) != 1 || got.NonOwner[0].Generation != 3 || got.NonOwner[0].Instance != "a" || got.NonOwner[0].OwnerInstance != "b" {
		t.Fatalf("non-owner commits: got %+v, want a's commit of partition 0 in generation 3, owned by b", got.NonOwner)
	}
}

// A zombie's late commits are those it sends after its resume under the member id and
// generation it held when it was frozen.
func TestLateCommitsUnderTheFrozenSession(t *testing.T) {
	t.Parallel()
	h := History{
		Joins: []Join{{AtS: 1, Instance: "z", MemberID: "m1", Generation: 4}, {AtS: 20, Instance: "z", MemberID: "m2", Generation: 7}},
		Commits: []Commit{
			{SentAtS: 5, Instance: "z", MemberID: "m1", Generation: 4},                 // before the freeze
			{SentAtS: 15, Instance: "z", MemberID: "m1", Generation: 4, ErrorCode: 25}, // late
			{SentAtS: 21, Instance: "z", MemberID: "m2", Generation: 7},                // its new session
		},
	}
	if got := h.LateCommits("z", 6, 15); len(got) != 1 || got[0].ErrorCode != 25 {
		t.Fatalf("late commits: got %+v, want the one refused at 15 s", got)
	}
}
