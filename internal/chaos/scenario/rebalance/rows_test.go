package rebalance

import (
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/groupwatch"
)

// The two validity rows that make a run whose commits the tap could not read, or whose
// group ran another protocol than the one asked for, INVALID rather than PASS.
func TestRowsOnTheProtocolAndTheJudgedCommits(t *testing.T) {
	t.Parallel()
	const topic = "t"
	assigned := []groupwatch.Assignment{{Instance: "a", MemberID: "m", Generation: 3, MemberEpoch: true, Partitions: map[string][]int32{topic: {0}}}}
	commits := []groupwatch.Commit{{Instance: "a", MemberID: "m", Generation: 3, Topic: topic, Partition: 0}}
	joins := []groupwatch.Join{{Instance: "a", MemberID: "m", Generation: 3, Protocol: groupwatch.ProtocolConsumer}}
	tests := []struct {
		name          string
		h             groupwatch.History
		protocol      string
		judged, ranOK bool
	}{
		{"KIP-848 read and asked for", groupwatch.History{Joins: joins, Assignments: assigned, Commits: commits}, "consumer", true, true},
		{"heartbeat assignments unread", groupwatch.History{Joins: joins, Commits: commits}, "consumer", false, true},
		{"no commit at all", groupwatch.History{Joins: joins, Assignments: assigned}, "consumer", false, true},
		{"fell back to the classic protocol", groupwatch.History{Joins: []groupwatch.Join{{Protocol: "cooperative-sticky"}}, Assignments: assigned, Commits: commits}, "consumer", true, false},
		{"eager asked, one member cooperative", groupwatch.History{Joins: []groupwatch.Join{{Protocol: "sticky"}, {Protocol: "cooperative-sticky"}}, Assignments: assigned, Commits: commits}, "eager", true, false},
		{"no join seen", groupwatch.History{Assignments: assigned, Commits: commits}, "eager", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := judgedCheck(tt.h, topic); got.OK != tt.judged {
				t.Errorf("judged row: got %v (%s), want %v", got.OK, got.Got, tt.judged)
			}
			if got := protocolCheck(tt.h, tt.protocol); got.OK != tt.ranOK {
				t.Errorf("protocol row: got %v (%s), want %v", got.OK, got.Got, tt.ranOK)
			}
		})
	}
}
