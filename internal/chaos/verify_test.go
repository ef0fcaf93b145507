package chaos

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// committed makes the payments table of a test: the ids, with made-up fields.
func committed(ids ...string) map[string]PaymentFields {
	payments := map[string]PaymentFields{}
	for _, id := range ids {
		payments[id] = PaymentFields{UserID: "u-" + id, Amount: 100, Currency: "EUR"}
	}
	return payments
}

func TestObservedFill(t *testing.T) {
	t.Parallel()
	type counts struct {
		Lost, LostNoEvent, LostNoDecision, LostNotCommitted, Phantom, DuplicatesDelivered, DuplicateEffects, Decisions int
	}
	tests := []struct {
		name string
		obs  Observed
		want counts
	}{
		{
			name: "every payment has one event and one decision",
			obs: Observed{
				Committed: committed("p1", "p2"),
				Topic:     TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e2": 1}, PaymentEvents: map[string]int{"p1": 1, "p2": 1}},
				Decisions: map[string]int{"p1": 1, "p2": 1},
			},
			want: counts{Decisions: 2},
		},
		{
			name: "redelivered events are duplicates, not losses",
			obs: Observed{
				Committed: committed("p1"),
				Topic:     TopicContents{Records: 3, EventCopies: map[string]int{"e1": 3}, PaymentEvents: map[string]int{"p1": 3}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{DuplicatesDelivered: 2, Decisions: 1},
		},
		{
			name: "a record without an X-Event-Id is not a duplicate",
			obs: Observed{
				Committed: committed("p1"),
				Topic:     TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1}, PaymentEvents: map[string]int{"p1": 2}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{Decisions: 1},
		},
		{
			name: "no event and no decision count once as lost",
			obs: Observed{
				Committed: committed("p1", "p2", "p3"),
				Topic:     TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e3": 1}, PaymentEvents: map[string]int{"p1": 1, "p3": 1}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{Lost: 2, LostNoEvent: 1, LostNoDecision: 2, Decisions: 1},
		},
		{
			name: "events and decisions of uncommitted payments are phantoms; double decisions are duplicate effects",
			obs: Observed{
				Committed: committed("p1"),
				Topic:     TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e9": 1}, PaymentEvents: map[string]int{"p1": 1, "p9": 1}},
				Decisions: map[string]int{"p1": 2, "p9": 1, "p8": 1},
			},
			want: counts{Phantom: 2, DuplicateEffects: 1, Decisions: 4},
		},
		{
			name: "a 201 whose payment was never committed is lost, once however often it was answered",
			obs: Observed{
				Accepted:  []string{"p1", "p7", "p7"},
				Committed: committed("p1"),
				Topic:     TopicContents{Records: 1, EventCopies: map[string]int{"e1": 1}, PaymentEvents: map[string]int{"p1": 1}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{Lost: 1, LostNotCommitted: 1, Decisions: 1},
		},
		{
			name: "a 201 not committed and a committed payment without an event are two losses",
			obs: Observed{
				Accepted:  []string{"p1", "p2", "p7"},
				Committed: committed("p1", "p2"),
				Topic:     TopicContents{Records: 1, EventCopies: map[string]int{"e1": 1}, PaymentEvents: map[string]int{"p1": 1}},
			},
			want: counts{Lost: 2, LostNoEvent: 1, LostNotCommitted: 1},
		},
		{
			name: "without a consumer database only the topic decides what is lost",
			obs: Observed{
				Committed: committed("p1", "p2"),
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
			got := counts{r.Lost, r.LostNoEvent, r.LostNoDecision, r.LostNotCommitted, r.Phantom, r.DuplicatesDelivered, r.DuplicateEffects, r.Decisions}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Fill (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTotalsMismatches(t *testing.T) {
	t.Parallel()
	eur := func(user string) UserCurrency { return UserCurrency{UserID: user, Currency: "EUR"} }
	usd := func(user string) UserCurrency { return UserCurrency{UserID: user, Currency: "USD"} }
	tests := []struct {
		name      string
		want, got map[UserCurrency]RunningTotal
		mismatch  []TotalsMismatch
		users     int
	}{
		{
			name: "equal totals",
			want: map[UserCurrency]RunningTotal{eur("u-1"): {2, "2499"}, usd("u-1"): {1, "700"}},
			got:  map[UserCurrency]RunningTotal{eur("u-1"): {2, "2499"}, usd("u-1"): {1, "700"}},
		},
		{
			name: "a redelivery counted twice",
			want: map[UserCurrency]RunningTotal{eur("u-1"): {2, "2499"}, eur("u-2"): {1, "5"}},
			got:  map[UserCurrency]RunningTotal{eur("u-1"): {3, "4498"}, eur("u-2"): {1, "5"}},
			mismatch: []TotalsMismatch{
				{Key: eur("u-1"), Want: RunningTotal{2, "2499"}, Got: RunningTotal{3, "4498"}},
			},
			users: 1,
		},
		{
			name: "an amount off with the right count",
			want: map[UserCurrency]RunningTotal{eur("u-1"): {2, "2499"}},
			got:  map[UserCurrency]RunningTotal{eur("u-1"): {2, "2500"}},
			mismatch: []TotalsMismatch{
				{Key: eur("u-1"), Want: RunningTotal{2, "2499"}, Got: RunningTotal{2, "2500"}},
			},
			users: 1,
		},
		{
			name: "missing and extra rows; two currencies of one user count as one user",
			want: map[UserCurrency]RunningTotal{eur("u-1"): {1, "10"}, usd("u-1"): {1, "20"}},
			got:  map[UserCurrency]RunningTotal{eur("u-2"): {1, "10"}},
			mismatch: []TotalsMismatch{
				{Key: eur("u-1"), Want: RunningTotal{1, "10"}},
				{Key: usd("u-1"), Want: RunningTotal{1, "20"}},
				{Key: eur("u-2"), Got: RunningTotal{1, "10"}},
			},
			users: 2,
		},
		{
			name: "a row of zeros is no row",
			want: map[UserCurrency]RunningTotal{},
			got:  map[UserCurrency]RunningTotal{eur("u-1"): {0, "0"}},
		},
		{
			name: "check off: no totals on either side",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := totalsMismatches(tt.want, tt.got)
			if diff := cmp.Diff(tt.mismatch, got); diff != "" {
				t.Errorf("totalsMismatches (-want +got):\n%s", diff)
			}
			var r Report
			Observed{ExpectedTotals: tt.want, ConsumerTotals: tt.got}.Fill(&r)
			if r.TotalsMismatchedUsers != tt.users || r.DuplicateEffects != tt.users {
				t.Errorf("Fill: totals_mismatched_users = %d, duplicate_effects = %d, want %d and %d",
					r.TotalsMismatchedUsers, r.DuplicateEffects, tt.users, tt.users)
			}
		})
	}
}

// Both kinds of duplicate effect add up: payments decided twice and users whose totals
// differ.
func TestFillDuplicateEffectsAddsTotals(t *testing.T) {
	t.Parallel()
	obs := Observed{
		Committed:      committed("p1", "p2"),
		Topic:          TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e2": 1}, PaymentEvents: map[string]int{"p1": 1, "p2": 1}},
		Decisions:      map[string]int{"p1": 2, "p2": 1},
		ExpectedTotals: map[UserCurrency]RunningTotal{{"u-1", "EUR"}: {1, "10"}, {"u-2", "EUR"}: {1, "20"}},
		ConsumerTotals: map[UserCurrency]RunningTotal{{"u-1", "EUR"}: {2, "20"}, {"u-2", "EUR"}: {1, "20"}},
	}
	var r Report
	obs.Fill(&r)
	if r.DuplicateEffects != 2 || r.TotalsMismatchedUsers != 1 {
		t.Errorf("duplicate_effects = %d, totals_mismatched_users = %d, want 2 and 1", r.DuplicateEffects, r.TotalsMismatchedUsers)
	}
	wantNote := "running totals of u-1 in EUR: consumer 2 payments for 20, committed 1 for 10"
	if len(r.Notes) != 1 || r.Notes[0] != wantNote {
		t.Errorf("notes = %q, want [%q]", r.Notes, wantNote)
	}
}
