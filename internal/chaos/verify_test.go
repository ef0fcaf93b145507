package chaos

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestObservedFill(t *testing.T) {
	t.Parallel()
	type counts struct {
		Lost, LostNoEvent, LostNoDecision, Phantom, DuplicatesDelivered, DuplicateEffects, Decisions int
	}
	tests := []struct {
		name string
		obs  Observed
		want counts
	}{
		{
			name: "every payment has one event and one decision",
			obs: Observed{
				Committed: map[string]bool{"p1": true, "p2": true},
				Topic:     TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e2": 1}, PaymentEvents: map[string]int{"p1": 1, "p2": 1}},
				Decisions: map[string]int{"p1": 1, "p2": 1},
			},
			want: counts{Decisions: 2},
		},
		{
			name: "redelivered events are duplicates, not losses",
			obs: Observed{
				Committed: map[string]bool{"p1": true},
				Topic:     TopicContents{Records: 3, EventCopies: map[string]int{"e1": 3}, PaymentEvents: map[string]int{"p1": 3}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{DuplicatesDelivered: 2, Decisions: 1},
		},
		{
			name: "a record without an X-Event-Id is malformed, not a duplicate",
			obs: Observed{
				Committed: map[string]bool{"p1": true},
				Topic:     TopicContents{Records: 2, Malformed: 1, EventCopies: map[string]int{"e1": 1}, PaymentEvents: map[string]int{"p1": 2}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{Decisions: 1},
		},
		{
			name: "no event and no decision count once as lost",
			obs: Observed{
				Committed: map[string]bool{"p1": true, "p2": true, "p3": true},
				Topic:     TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e3": 1}, PaymentEvents: map[string]int{"p1": 1, "p3": 1}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{Lost: 2, LostNoEvent: 1, LostNoDecision: 2, Decisions: 1},
		},
		{
			name: "events and decisions of uncommitted payments are phantoms; double decisions are duplicate effects",
			obs: Observed{
				Committed: map[string]bool{"p1": true},
				Topic:     TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e9": 1}, PaymentEvents: map[string]int{"p1": 1, "p9": 1}},
				Decisions: map[string]int{"p1": 2, "p9": 1, "p8": 1},
			},
			want: counts{Phantom: 2, DuplicateEffects: 1, Decisions: 4},
		},
		{
			name: "without a consumer database only the topic decides what is lost",
			obs: Observed{
				Committed: map[string]bool{"p1": true, "p2": true},
				Topic:     TopicContents{Records: 1, EventCopies: map[string]int{"e1": 1}, PaymentEvents: map[string]int{"p1": 1}},
			},
			want: counts{Lost: 1, LostNoEvent: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r Report
			tt.obs.Fill(&r)
			got := counts{r.Lost, r.LostNoEvent, r.LostNoDecision, r.Phantom, r.DuplicatesDelivered, r.DuplicateEffects, r.Decisions}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Fill (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		checks      []Check
		wantVerdict string
	}{
		{"all hold", []Check{{Kind: Validity, OK: true}, {Kind: SLO, OK: true}}, "PASS"},
		{"an SLO fails", []Check{{Kind: Validity, OK: true}, {Kind: SLO, OK: false}}, "FAIL"},
		{"faults did not bite: invalid even if the SLOs hold", []Check{{Kind: Validity, OK: false}, {Kind: SLO, OK: true}}, "INVALID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := Report{Checks: tt.checks}
			r.Judge()
			if got := r.Verdict(); got != tt.wantVerdict {
				t.Errorf("verdict: got %s, want %s", got, tt.wantVerdict)
			}
		})
	}
}
