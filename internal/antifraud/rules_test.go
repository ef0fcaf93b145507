package antifraud

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

func TestDecideAmount(t *testing.T) {
	t.Parallel()
	rules := Rules{ReviewAmount: 1000}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

	tests := []struct {
		name   string
		amount int64
		want   Decision
	}{
		{"well below", 1, Decision{Verdict: Approve, Reasons: []string{}}},
		{"one below the threshold", 999, Decision{Verdict: Approve, Reasons: []string{}}},
		{"at the threshold", 1000, Decision{Verdict: Approve, Reasons: []string{}}},
		{"one above the threshold", 1001, Decision{Verdict: Review, Reasons: []string{ReasonAmountAboveReview}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := Payment{ID: uuid.New(), UserID: "u-1", Amount: tt.amount, OccurredAt: at}
			got := rules.Decide(p, nil)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide(amount %d) mismatch (-want +got):\n%s", tt.amount, diff)
			}
		})
	}
}

func TestDecideVelocity(t *testing.T) {
	t.Parallel()
	// Review from the 3rd payment in the window, block from the 5th (counting the payment
	// being decided).
	rules := Rules{ReviewAmount: 1_000_000, VelocityWindow: 10 * time.Minute, VelocityReview: 2, VelocityBlock: 4}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	self := Payment{ID: uuid.New(), UserID: "u-1", Amount: 100, OccurredAt: at}
	// earlier returns n payments of user u-1 that occurred d before self.
	earlier := func(n int, d time.Duration) []Payment {
		var ps []Payment
		for range n {
			ps = append(ps, Payment{ID: uuid.New(), UserID: "u-1", Amount: 100, OccurredAt: at.Add(-d)})
		}
		return ps
	}
	approve := Decision{Verdict: Approve, Reasons: []string{}}
	review := Decision{Verdict: Review, Reasons: []string{ReasonVelocityAboveReview}}
	block := Decision{Verdict: Block, Reasons: []string{ReasonVelocityAboveBlock}}

	tests := []struct {
		name    string
		history []Payment
		want    Decision
	}{
		{"no history", nil, approve},
		{"at the review limit", earlier(1, time.Minute), approve},
		{"one above the review limit", earlier(2, time.Minute), review},
		{"at the block limit", earlier(3, time.Minute), review},
		{"one above the block limit", earlier(4, time.Minute), block},
		{"window start is inside", earlier(2, 10*time.Minute), review},
		{"just before the window start is outside", earlier(2, 10*time.Minute+time.Nanosecond), approve},
		{"same instant is outside (window ends before the payment)", earlier(2, 0), approve},
		{"later payments do not count", earlier(4, -time.Second), approve},
		{"the payment itself does not count (redelivery)", append(earlier(1, time.Minute), self), approve},
		{"other users do not count", []Payment{
			{ID: uuid.New(), UserID: "u-2", OccurredAt: at.Add(-time.Minute)},
			{ID: uuid.New(), UserID: "u-2", OccurredAt: at.Add(-time.Minute)},
		}, approve},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := rules.Decide(self, tt.history)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide with %d payments in history mismatch (-want +got):\n%s", len(tt.history), diff)
			}
		})
	}
}

func TestDecideCombinesReasons(t *testing.T) {
	t.Parallel()
	rules := Rules{ReviewAmount: 10, VelocityWindow: time.Hour, VelocityReview: 1, VelocityBlock: 1}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	p := Payment{ID: uuid.New(), UserID: "u-1", Amount: 11, OccurredAt: at}
	history := []Payment{{ID: uuid.New(), UserID: "u-1", Amount: 1, OccurredAt: at.Add(-time.Minute)}}

	got := rules.Decide(p, history)
	want := Decision{Verdict: Block, Reasons: []string{ReasonAmountAboveReview, ReasonVelocityAboveBlock}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decide mismatch (-want +got):\n%s", diff)
	}
}

func TestRulesDefaults(t *testing.T) {
	t.Parallel()
	got := Rules{}.withDefaults()
	want := Rules{ReviewAmount: 100_000, VelocityWindow: 10 * time.Minute, VelocityReview: 5, VelocityBlock: 10}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Rules{}.withDefaults() mismatch (-want +got):\n%s", diff)
	}
	if err := (Rules{}).Validate(); err != nil {
		t.Errorf("Rules{}.Validate() = %v, want nil", err)
	}
}

func TestRulesValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		rules Rules
	}{
		{"negative amount", Rules{ReviewAmount: -1}},
		{"negative window", Rules{VelocityWindow: -time.Second}},
		{"block below review", Rules{VelocityReview: 8, VelocityBlock: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := tt.rules.Validate(); err == nil {
				t.Errorf("%+v.Validate() = nil, want an error", tt.rules)
			}
		})
	}
}
