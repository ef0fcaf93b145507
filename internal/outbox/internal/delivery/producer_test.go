package delivery

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The publish timeout doubles after each publish with a transport failure, stops at
// the caller's budget or at 16 times its base, and any answer of the broker resets it.
// A rejection is an answer.
func TestPublishTimeoutsBackOffWithinTheBudget(t *testing.T) {
	timedOut := kgo.ProduceResults{{Err: context.DeadlineExceeded}}
	acked := kgo.ProduceResults{{}}
	rejected := kgo.ProduceResults{{Err: kerr.MessageTooLarge}}
	for _, tc := range []struct {
		name         string
		base, budget time.Duration
		results      []kgo.ProduceResults
		want         []time.Duration // Next before the first result, then after each
	}{{
		name: "the budget is smaller than a doubling", base: 3 * time.Second, budget: 5 * time.Second,
		results: []kgo.ProduceResults{timedOut, timedOut, acked},
		want:    []time.Duration{3 * time.Second, 5 * time.Second, 5 * time.Second, 3 * time.Second},
	}, {
		name: "the budget allows some doublings", base: 2 * time.Second, budget: 9 * time.Second,
		results: []kgo.ProduceResults{timedOut, timedOut, timedOut, rejected},
		want:    []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 9 * time.Second, 2 * time.Second},
	}, {
		name: "at most 16 times the base", base: time.Second, budget: time.Minute,
		results: []kgo.ProduceResults{timedOut, timedOut, timedOut, timedOut, timedOut, timedOut},
		want: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
			16 * time.Second, 16 * time.Second, 16 * time.Second},
	}, {
		name: "a budget below the base leaves the base", base: 3 * time.Second, budget: time.Second,
		results: []kgo.ProduceResults{timedOut},
		want:    []time.Duration{3 * time.Second, 3 * time.Second},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var timeouts PublishTimeouts
			got := []time.Duration{timeouts.Next(tc.base, tc.budget)}
			for _, res := range tc.results {
				timeouts.Judge(res)
				got = append(got, timeouts.Next(tc.base, tc.budget))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("timeouts %v, want %v", got, tc.want)
			}
		})
	}
}
