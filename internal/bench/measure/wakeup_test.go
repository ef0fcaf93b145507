package measure

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// The wake-up figures of a latency run are the relay's counters after the run minus
// those after the warm-up, read from a real registry: the warm-up's claim must not count,
// and the means must be of the run's events alone.
func TestWakeFiguresSinceTheWarmUp(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	claims := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_claims_total"}, []string{"woken_by"})
	waits := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "outbox_commit_to_claim_seconds"}, []string{"woken_by"})
	reg.MustRegister(claims, waits)

	claims.WithLabelValues("poll").Inc() // the warm-up: one claim of one event, 1 s late
	waits.WithLabelValues("poll").Observe(1)
	warmedUp, err := gatherWakeups(reg)
	if err != nil {
		t.Fatal(err)
	}
	claims.WithLabelValues("busy").Add(1) // the run: three events claimed busy, one by a nudge
	for _, s := range []float64{0.001, 0.002, 0.003} {
		waits.WithLabelValues("busy").Observe(s)
	}
	claims.WithLabelValues("nudge").Inc()
	waits.WithLabelValues("nudge").Observe(0.006)
	after, err := gatherWakeups(reg)
	if err != nil {
		t.Fatal(err)
	}

	got := after.since(warmedUp)
	want := WakeFigures{
		"busy":  {claims: 1, events: 3, meanWaitMs: 2, Share: 0.75, claimsShare: 0.5},
		"nudge": {claims: 1, events: 1, meanWaitMs: 6, Share: 0.25, claimsShare: 0.5},
		"poll":  {},
	}
	approx := cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(WakeFigure{}), approx); diff != "" {
		t.Errorf("wake-up figures of the run (-want +got):\n%s", diff)
	}
	if got, want := got.MeanWaitMs(), 3.0; got-want > 1e-9 || want-got > 1e-9 {
		t.Errorf("mean commit-to-claim = %v ms, want %v", got, want)
	}
}
