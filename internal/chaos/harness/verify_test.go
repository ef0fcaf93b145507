package harness

import (
	"slices"
	"testing"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/google/go-cmp/cmp"
)

// committed makes the payments table of a test: the ids, with made-up fields.
func committed(ids ...string) map[string]verify.PaymentFields {
	payments := map[string]verify.PaymentFields{}
	for _, id := range ids {
		payments[id] = verify.PaymentFields{UserID: "u-" + id, Amount: 100, Currency: "EUR"}
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
		obs  verify.Observed
		want counts
	}{
		{
			name: "every payment has one event and one decision",
			obs: verify.Observed{
				Committed: committed("p1", "p2"),
				Topic:     verify.TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e2": 1}, PaymentEvents: map[string]int{"p1": 1, "p2": 1}},
				Decisions: map[string]int{"p1": 1, "p2": 1},
			},
			want: counts{Decisions: 2},
		},
		{
			name: "redelivered events are duplicates, not losses",
			obs: verify.Observed{
				Committed: committed("p1"),
				Topic:     verify.TopicContents{Records: 3, EventCopies: map[string]int{"e1": 3}, PaymentEvents: map[string]int{"p1": 3}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{DuplicatesDelivered: 2, Decisions: 1},
		},
		{
			name: "a record without an X-Event-Id is not a duplicate",
			obs: verify.Observed{
				Committed: committed("p1"),
				Topic:     verify.TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1}, PaymentEvents: map[string]int{"p1": 2}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{Decisions: 1},
		},
		{
			name: "no event and no decision count once as lost",
			obs: verify.Observed{
				Committed: committed("p1", "p2", "p3"),
				Topic:     verify.TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e3": 1}, PaymentEvents: map[string]int{"p1": 1, "p3": 1}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{Lost: 2, LostNoEvent: 1, LostNoDecision: 2, Decisions: 1},
		},
		{
			name: "events and decisions of uncommitted payments are phantoms; double decisions are duplicate effects",
			obs: verify.Observed{
				Committed: committed("p1"),
				Topic:     verify.TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e9": 1}, PaymentEvents: map[string]int{"p1": 1, "p9": 1}},
				Decisions: map[string]int{"p1": 2, "p9": 1, "p8": 1},
			},
			want: counts{Phantom: 2, DuplicateEffects: 1, Decisions: 4},
		},
		{
			name: "a 201 whose payment was never committed is lost, once however often it was answered",
			obs: verify.Observed{
				Accepted:  []string{"p1", "p7", "p7"},
				Committed: committed("p1"),
				Topic:     verify.TopicContents{Records: 1, EventCopies: map[string]int{"e1": 1}, PaymentEvents: map[string]int{"p1": 1}},
				Decisions: map[string]int{"p1": 1},
			},
			want: counts{Lost: 1, LostNotCommitted: 1, Decisions: 1},
		},
		{
			name: "a 201 not committed and a committed payment without an event are two losses",
			obs: verify.Observed{
				Accepted:  []string{"p1", "p2", "p7"},
				Committed: committed("p1", "p2"),
				Topic:     verify.TopicContents{Records: 1, EventCopies: map[string]int{"e1": 1}, PaymentEvents: map[string]int{"p1": 1}},
			},
			want: counts{Lost: 2, LostNoEvent: 1, LostNotCommitted: 1},
		},
		{
			name: "without a consumer database only the topic decides what is lost",
			obs: verify.Observed{
				Committed: committed("p1", "p2"),
				Topic:     verify.TopicContents{Records: 1, EventCopies: map[string]int{"e1": 1}, PaymentEvents: map[string]int{"p1": 1}},
			},
			want: counts{Lost: 1, LostNoEvent: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r verdict.Report
			fillObserved(tt.obs, &r)
			got := counts{r.Lost, r.LostNoEvent, r.LostNoDecision, r.LostNotCommitted, r.Phantom, r.DuplicatesDelivered, r.DuplicateEffects, r.Decisions}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Fill (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTotalsMismatches(t *testing.T) {
	t.Parallel()
	eur := func(user string) verify.UserCurrency { return verify.UserCurrency{UserID: user, Currency: "EUR"} }
	usd := func(user string) verify.UserCurrency { return verify.UserCurrency{UserID: user, Currency: "USD"} }
	tests := []struct {
		name      string
		want, got map[verify.UserCurrency]verify.RunningTotal
		mismatch  []totalsMismatch
		users     int
	}{
		{
			name: "equal totals",
			want: map[verify.UserCurrency]verify.RunningTotal{eur("u-1"): {Payments: 2, Amount: "2499"}, usd("u-1"): {Payments: 1, Amount: "700"}},
			got:  map[verify.UserCurrency]verify.RunningTotal{eur("u-1"): {Payments: 2, Amount: "2499"}, usd("u-1"): {Payments: 1, Amount: "700"}},
		},
		{
			name: "a redelivery counted twice",
			want: map[verify.UserCurrency]verify.RunningTotal{eur("u-1"): {Payments: 2, Amount: "2499"}, eur("u-2"): {Payments: 1, Amount: "5"}},
			got:  map[verify.UserCurrency]verify.RunningTotal{eur("u-1"): {Payments: 3, Amount: "4498"}, eur("u-2"): {Payments: 1, Amount: "5"}},
			mismatch: []totalsMismatch{
				{Key: eur("u-1"), Want: verify.RunningTotal{Payments: 2, Amount: "2499"}, Got: verify.RunningTotal{Payments: 3, Amount: "4498"}},
			},
			users: 1,
		},
		{
			name: "an amount off with the right count",
			want: map[verify.UserCurrency]verify.RunningTotal{eur("u-1"): {Payments: 2, Amount: "2499"}},
			got:  map[verify.UserCurrency]verify.RunningTotal{eur("u-1"): {Payments: 2, Amount: "2500"}},
			mismatch: []totalsMismatch{
				{Key: eur("u-1"), Want: verify.RunningTotal{Payments: 2, Amount: "2499"}, Got: verify.RunningTotal{Payments: 2, Amount: "2500"}},
			},
			users: 1,
		},
		{
			name: "missing and extra rows; two currencies of one user count as one user",
			want: map[verify.UserCurrency]verify.RunningTotal{eur("u-1"): {Payments: 1, Amount: "10"}, usd("u-1"): {Payments: 1, Amount: "20"}},
			got:  map[verify.UserCurrency]verify.RunningTotal{eur("u-2"): {Payments: 1, Amount: "10"}},
			mismatch: []totalsMismatch{
				{Key: eur("u-1"), Want: verify.RunningTotal{Payments: 1, Amount: "10"}},
				{Key: usd("u-1"), Want: verify.RunningTotal{Payments: 1, Amount: "20"}},
				{Key: eur("u-2"), Got: verify.RunningTotal{Payments: 1, Amount: "10"}},
			},
			users: 2,
		},
		{
			name: "a row of zeros is no row",
			want: map[verify.UserCurrency]verify.RunningTotal{},
			got:  map[verify.UserCurrency]verify.RunningTotal{eur("u-1"): {Payments: 0, Amount: "0"}},
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
			var r verdict.Report
			fillObserved(verify.Observed{ExpectedTotals: tt.want, ConsumerTotals: tt.got}, &r)
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
	obs := verify.Observed{
		Committed:      committed("p1", "p2"),
		Topic:          verify.TopicContents{Records: 2, EventCopies: map[string]int{"e1": 1, "e2": 1}, PaymentEvents: map[string]int{"p1": 1, "p2": 1}},
		Decisions:      map[string]int{"p1": 2, "p2": 1},
		ExpectedTotals: map[verify.UserCurrency]verify.RunningTotal{{UserID: "u-1", Currency: "EUR"}: {Payments: 1, Amount: "10"}, {UserID: "u-2", Currency: "EUR"}: {Payments: 1, Amount: "20"}},
		ConsumerTotals: map[verify.UserCurrency]verify.RunningTotal{{UserID: "u-1", Currency: "EUR"}: {Payments: 2, Amount: "20"}, {UserID: "u-2", Currency: "EUR"}: {Payments: 1, Amount: "20"}},
	}
	var r verdict.Report
	fillObserved(obs, &r)
	if r.DuplicateEffects != 2 || r.TotalsMismatchedUsers != 1 {
		t.Errorf("duplicate_effects = %d, totals_mismatched_users = %d, want 2 and 1", r.DuplicateEffects, r.TotalsMismatchedUsers)
	}
	wantNote := "running totals of u-1 in EUR: consumer 2 payments for 20, committed 1 for 10"
	if len(r.Notes) != 1 || r.Notes[0] != wantNote {
		t.Errorf("notes = %q, want [%q]", r.Notes, wantNote)
	}
}

// A payment with two event ids in the topic, and a decision that names another event
// than the topic's, each fail their own row, and their first example is in the notes.
func TestFillIdentities(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                      string
		eventIDs                  map[string][]string
		decisionEvents            map[string]string
		wantSeveralIDs, wantWrong int
		wantNote                  string
	}{
		{
			name:           "one event id per payment, named by its decision",
			eventIDs:       map[string][]string{"p1": {"e1"}, "p2": {"e2"}},
			decisionEvents: map[string]string{"p1": "e1", "p2": "e2"},
		},
		{
			name:           "copies of one event are one id",
			eventIDs:       map[string][]string{"p1": {"e1"}},
			decisionEvents: map[string]string{"p1": "e1"},
		},
		{
			name:           "a relay that minted a new id for a retry",
			eventIDs:       map[string][]string{"p1": {"e1", "e1b"}, "p2": {"e2"}},
			decisionEvents: map[string]string{"p1": "e1", "p2": "e2"},
			wantSeveralIDs: 1,
			wantNote:       "one event id per transition: payment p1 has 2 event ids for sequence 1 in the topic: e1, e1b",
		},
		{
			name:           "a decision made from another event",
			eventIDs:       map[string][]string{"p1": {"e1"}, "p2": {"e2"}},
			decisionEvents: map[string]string{"p1": "e1", "p2": "e9"},
			wantWrong:      1,
			wantNote:       "decision_event_mismatch: the decision of payment p2 has event_id e9, the topic has e2",
		},
		{
			name:           "a decision of a payment without an event is lost or a phantom, not a mismatch",
			eventIDs:       map[string][]string{"p1": {"e1"}},
			decisionEvents: map[string]string{"p1": "e1", "p2": "e2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obs := verify.Observed{Committed: committed("p1", "p2"), Topic: verify.NewTopicContents(), DecisionEvents: tt.decisionEvents}
			obs.Topic.PaymentEventIDs = tt.eventIDs
			for id, ids := range tt.eventIDs {
				obs.Topic.TransitionEventIDs[id] = map[int][]string{1: ids}
			}
			var r verdict.Report
			fillObserved(obs, &r)
			if r.PaymentsWithSeveralEventIDs != tt.wantSeveralIDs || r.DecisionEventMismatch != tt.wantWrong {
				t.Errorf("payments_with_several_event_ids = %d, decision_event_mismatch = %d, want %d and %d",
					r.PaymentsWithSeveralEventIDs, r.DecisionEventMismatch, tt.wantSeveralIDs, tt.wantWrong)
			}
			if tt.wantNote != "" && !slices.Contains(r.Notes, tt.wantNote) {
				t.Errorf("notes = %q, want one to be %q", r.Notes, tt.wantNote)
			}
		})
	}
}

// An event whose payload disagrees with the committed payment is counted once per
// payment, however many copies disagree; a phantom's payload has nothing to agree with.
func TestFillPayloadMismatches(t *testing.T) {
	t.Parallel()
	obs := verify.Observed{Committed: committed("p1", "p2", "p3"), Topic: verify.NewTopicContents()}
	obs.Topic.PaymentPayloads = map[string][]verify.PaymentFields{
		"p1": {obs.Committed["p1"]},
		"p2": {{UserID: "u-p2", Amount: 999, Currency: "EUR"}, {UserID: "u-p2", Amount: 100, Currency: "USD"}},
		"p9": {{UserID: "u-p9", Amount: 1, Currency: "EUR"}},
	}
	var r verdict.Report
	fillObserved(obs, &r)
	if r.PayloadMismatches != 1 {
		t.Errorf("payload_mismatches = %d, want 1", r.PayloadMismatches)
	}
	want := `payload of payment p2: user "u-p2", amount 999, currency "EUR"; committed user "u-p2", amount 100, currency "EUR"`
	if !slices.Contains(r.Notes, want) {
		t.Errorf("notes = %q, want one to be %q", r.Notes, want)
	}
}

// Fed a broken outcome, the verifier's rows fail the run, each on the row that names the
// fault: the checks can fail, and a mentor can tell which one did.
func TestBrokenOutcomesFailTheirRow(t *testing.T) {
	t.Parallel()
	good := func() verify.Observed {
		obs := verify.Observed{
			Accepted:           []string{"p1"},
			Committed:          committed("p1"),
			ExpectedPartitions: 3,
			Schema:             verify.Schema{OutboxEvents: true, OutboxDLQ: true, ConsumerDatabase: true, Decisions: true, DecisionEventIDs: true, UserTotals: true},
			Decisions:          map[string]int{"p1": 1},
			DecisionEvents:     map[string]string{"p1": "e1"},
			ConsumerDuplicates: 0,
		}
		obs.Topic = verify.NewTopicContents()
		obs.Topic.Partitions, obs.Topic.Records = 3, 1
		obs.Topic.EventCopies = map[string]int{"e1": 1}
		obs.Topic.PaymentEvents = map[string]int{"p1": 1}
		obs.Topic.PaymentEventIDs = map[string][]string{"p1": {"e1"}}
		obs.Topic.TransitionEventIDs = map[string]map[int][]string{"p1": {1: {"e1"}}}
		obs.Topic.PaymentPayloads = map[string][]verify.PaymentFields{"p1": {obs.Committed["p1"]}}
		return obs
	}
	tests := []struct {
		name    string
		breakIt func(o *verify.Observed)
		wantRow string // the one row that fails; empty: none
		wantOff string // a row shown as off
	}{
		{name: "nothing broken"},
		{
			name: "a payment with two event ids",
			breakIt: func(o *verify.Observed) {
				o.Topic.PaymentEventIDs["p1"] = []string{"e1", "e2"}
				o.Topic.TransitionEventIDs["p1"][1] = []string{"e1", "e2"}
				o.Topic.EventCopies["e2"] = 1
			},
			wantRow: "one event id per transition (payments with >1 X-Event-Id for one sequence)",
		},
		{
			name:    "a decision whose event_id differs",
			breakIt: func(o *verify.Observed) { o.DecisionEvents["p1"] = "e9" },
			wantRow: "decision_event_mismatch (decision's event_id not the topic's)",
		},
		{
			name: "a record with the wrong key",
			breakIt: func(o *verify.Observed) {
				o.Topic.BadKey = verify.Violations{Count: 1, First: "partition 0 offset 0: " + `key "x", payment_id "p1"`}
			},
			wantRow: "record key is the payment id",
		},
		{
			name: "a record without its headers",
			breakIt: func(o *verify.Observed) {
				o.Topic.BadHeaders = verify.Violations{Count: 1, First: "partition 0 offset 0: " + "no X-Event-Id header"}
			},
			wantRow: "record headers (X-Event-Id, X-Event-Type, X-Event-Occurred-At)",
		},
		{
			name: "a payload without a field",
			breakIt: func(o *verify.Observed) {
				o.Topic.BadPayload = verify.Violations{Count: 1, First: "partition 0 offset 0: " + "payload without amount"}
			},
			wantRow: "record payload is the v1 of its type with every field",
		},
		{
			name: "a payload with another amount than the payment's",
			breakIt: func(o *verify.Observed) {
				o.Topic.PaymentPayloads["p1"] = []verify.PaymentFields{{UserID: "u-p1", Amount: 1, Currency: "EUR"}}
			},
			wantRow: "payload matches the committed payment (user, amount, currency)",
		},
		{
			name:    "a topic of one partition",
			breakIt: func(o *verify.Observed) { o.Topic.Partitions = 1 },
			wantRow: "topic partitions",
		},
		{
			name:    "a 201 never committed",
			breakIt: func(o *verify.Observed) { o.Accepted = append(o.Accepted, "p7") },
			wantRow: "lost (no event or no decision)",
		},
		{
			name:    "no user_totals: a MUST",
			breakIt: func(o *verify.Observed) { o.Schema.UserTotals = false },
			wantRow: "consumer tables: decisions(payment_id, event_id), user_totals",
		},
		{
			name: "no decisions.event_id: a MUST, and the row it feeds is off",
			breakIt: func(o *verify.Observed) {
				o.Schema.DecisionEventIDs, o.DecisionEvents = false, nil
			},
			wantRow: "consumer tables: decisions(payment_id, event_id), user_totals",
			wantOff: "decision_event_mismatch (decision's event_id not the topic's)",
		},
		{
			name:    "no outbox_dlq and no outbox_events: a MAY, shown off",
			breakIt: func(o *verify.Observed) { o.Schema.OutboxDLQ, o.Schema.OutboxEvents = false, false },
			wantOff: "dlq",
		},
		{
			name: "no consumer database: its rows are off",
			breakIt: func(o *verify.Observed) {
				o.Schema = verify.Schema{OutboxEvents: true, OutboxDLQ: true}
				o.Decisions, o.DecisionEvents = nil, nil
			},
			wantOff: "consumer tables: decisions(payment_id, event_id), user_totals",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			obs := good()
			if tt.breakIt != nil {
				tt.breakIt(&obs)
			}
			r := verdict.Report{PaymentsSent: 1, APIAccepted: 1, DrainSeconds: 1}
			fillObserved(obs, &r)
			r.Checks = append(sloChecks(&r, false), contractChecks(&r)...)
			r.Judge()
			var failed, off []string
			for _, c := range r.Checks {
				if !c.OK {
					failed = append(failed, c.Name)
				}
				if c.Off {
					off = append(off, c.Name)
				}
			}
			var wantFailed []string
			wantVerdict := verdict.Pass
			if tt.wantRow != "" {
				wantFailed, wantVerdict = []string{tt.wantRow}, verdict.Fail
			}
			if diff := cmp.Diff(wantFailed, failed); diff != "" {
				t.Errorf("failed rows (-want +got):\n%s", diff)
			}
			if tt.wantOff != "" && !slices.Contains(off, tt.wantOff) {
				t.Errorf("rows off = %q, want %q among them", off, tt.wantOff)
			}
			if r.Verdict() != wantVerdict || r.Outcome != wantVerdict {
				t.Errorf("verdict %s (outcome %s), want %s", r.Verdict(), r.Outcome, wantVerdict)
			}
		})
	}
}
