package antifraud

import (
	"math"
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
			got := rules.Decide(p, History{})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide(amount %d) mismatch (-want +got):\n%s", tt.amount, diff)
			}
		})
	}
}

func TestInVelocityWindow(t *testing.T) {
	t.Parallel()
	rules := Rules{VelocityWindow: 10 * time.Minute}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	self := Payment{ID: uuid.New(), UserID: "u-1", Amount: 100, OccurredAt: at}
	// earlier is a payment of u-1 that occurred d before self.
	earlier := func(d time.Duration) Payment {
		return Payment{ID: uuid.New(), UserID: "u-1", Amount: 100, OccurredAt: at.Add(-d)}
	}

	tests := []struct {
		name  string
		other Payment
		want  bool
	}{
		{"a minute before", earlier(time.Minute), true},
		{"window start is inside", earlier(10 * time.Minute), true},
		{"just before the window start is outside", earlier(10*time.Minute + time.Nanosecond), false},
		{"same instant is outside (window ends before the payment)", earlier(0), false},
		{"later payments do not count", earlier(-time.Second), false},
		{"the payment itself does not count (redelivery)", self, false},
		{"other users do not count", Payment{ID: uuid.New(), UserID: "u-2", OccurredAt: at.Add(-time.Minute)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := rules.inVelocityWindow(self, tt.other); got != tt.want {
				t.Errorf("inVelocityWindow(payment at %s, %s's payment at %s) = %v, want %v",
					self.OccurredAt.Format(time.TimeOnly), tt.other.UserID, tt.other.OccurredAt.Format(time.TimeOnly), got, tt.want)
			}
		})
	}
}

func TestDecideVelocity(t *testing.T) {
	t.Parallel()
	// Review from the 3rd payment in the window, block from the 5th (counting the payment
	// being decided).
	rules := Rules{ReviewAmount: 1_000_000, VelocityWindow: 10 * time.Minute, VelocityReview: 2, VelocityBlock: 4}
	self := Payment{ID: uuid.New(), UserID: "u-1", Amount: 100, OccurredAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	approve := Decision{Verdict: Approve, Reasons: []string{}}
	review := Decision{Verdict: Review, Reasons: []string{ReasonVelocityAboveReview}}
	block := Decision{Verdict: Block, Reasons: []string{ReasonVelocityAboveBlock}}

	tests := []struct {
		name   string
		recent int
		want   Decision
	}{
		{"no history", 0, approve},
		{"at the review limit", 1, approve},
		{"one above the review limit", 2, review},
		{"at the block limit", 3, review},
		{"one above the block limit", 4, block},
		{"far above the block limit", 400, block},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := rules.Decide(self, History{Recent: tt.recent})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide with %d recent payments mismatch (-want +got):\n%s", tt.recent, diff)
			}
		})
	}
}

func TestDecideTotal(t *testing.T) {
	t.Parallel()
	rules := Rules{ReviewAmount: math.MaxInt64, TotalReviewAmount: 10_000}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	approve := Decision{Verdict: Approve, Reasons: []string{}}
	review := Decision{Verdict: Review, Reasons: []string{ReasonTotalAboveReview}}

	tests := []struct {
		name   string
		amount int64
		total  Total
		want   Decision
	}{
		{"first payment, below", 9_999, Total{}, approve},
		{"first payment, at the threshold", 10_000, Total{}, approve},
		{"first payment, one above", 10_001, Total{}, review},
		{"takes the total to the threshold", 1, Total{Payments: 3, Amount: 9_999}, approve},
		{"takes the total one above the threshold", 2, Total{Payments: 3, Amount: 9_999}, review},
		{"total already above: every further payment", 1, Total{Payments: 9, Amount: 50_000}, review},
		{"total at the cap does not overflow into approval", math.MaxInt64, Total{Payments: 2, Amount: math.MaxInt64}, review},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := Payment{ID: uuid.New(), UserID: "u-1", Amount: tt.amount, Currency: "EUR", OccurredAt: at}
			got := rules.Decide(p, History{Total: tt.total})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide(amount %d, total %+v) mismatch (-want +got):\n%s", tt.amount, tt.total, diff)
			}
		})
	}
}

func TestTotalPlus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		total  Total
		amount int64
		want   Total
	}{
		{"from zero", Total{}, 1999, Total{Payments: 1, Amount: 1999}},
		{"adds up", Total{Payments: 2, Amount: 3000}, 1000, Total{Payments: 3, Amount: 4000}},
		{"up to the cap exactly", Total{Payments: 1, Amount: math.MaxInt64 - 1}, 1, Total{Payments: 2, Amount: math.MaxInt64}},
		{"capped rather than overflowing", Total{Payments: 1, Amount: math.MaxInt64 - 1}, 2, Total{Payments: 2, Amount: math.MaxInt64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.total.plus(tt.amount); got != tt.want {
				t.Errorf("%+v.plus(%d) = %+v, want %+v", tt.total, tt.amount, got, tt.want)
			}
		})
	}
}

func TestDecideCombinesReasons(t *testing.T) {
	t.Parallel()
	rules := Rules{ReviewAmount: 10, VelocityWindow: time.Hour, VelocityReview: 1, VelocityBlock: 1, TotalReviewAmount: 100}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	p := Payment{ID: uuid.New(), UserID: "u-1", Amount: 11, OccurredAt: at}
	history := History{Recent: 1, Total: Total{Payments: 1, Amount: 90}}

	got := rules.Decide(p, history)
	want := Decision{Verdict: Block, Reasons: []string{ReasonAmountAboveReview, ReasonTotalAboveReview, ReasonVelocityAboveBlock}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decide mismatch (-want +got):\n%s", diff)
	}
}

func TestRulesDefaults(t *testing.T) {
	t.Parallel()
	got := Rules{}.withDefaults()
	want := Rules{ReviewAmount: 100_000, VelocityWindow: 10 * time.Minute, VelocityReview: 5, VelocityBlock: 10, TotalReviewAmount: 1_000_000_000}
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
		{"negative total amount", Rules{TotalReviewAmount: -1}},
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
