package delivery

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dscourse/payments-outbox/internal/outbox/internal/outboxtest"
	"github.com/dscourse/payments-outbox/internal/testenv"
	"github.com/dscourse/payments-outbox/migrations"
)

// Both relays run this monitor: an event pending longer than AlertAge raises an Error
// for operators, and the gauges follow the table; Also runs on each refresh (the CDC
// relay's slot figures).
func TestPendingMonitorAlertsOnTheOldestPendingAge(t *testing.T) {
	t.Parallel()
	pool := testenv.NewPool(t, migrations.Payments)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox_events (id, event_type, aggregate_id, payload, enqueued_at)
		VALUES (gen_random_uuid(), 'TestEvent', 'stuck', '{}', now() - interval '1 hour')`); err != nil {
		t.Fatalf("insert a stuck event: %v", err)
	}
	metrics, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	logs := &outboxtest.LogBuffer{}
	var also atomic.Int32
	m := PendingMonitor{Pool: pool, Metrics: metrics, Logger: logs.Logger(),
		Interval: 10 * time.Millisecond, QueryTimeout: 5 * time.Second, AlertAge: time.Minute,
		Also: func(context.Context) error { also.Add(1); return nil }}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	testenv.WaitFor(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(logs.String(), "outbox events are not being published"), "no Error about the oldest pending event logged:\n" + logs.String()
	})
	if !strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("the oldest pending alert is not at Error level:\n%s", logs.String())
	}
	if got := testutil.ToFloat64(metrics.pending); got != 1 {
		t.Errorf("outbox_pending_count = %v, want 1", got)
	}
	if got := testutil.ToFloat64(metrics.oldestPendingAge); got < 3500 || got > 3700 {
		t.Errorf("outbox_oldest_pending_age_seconds = %v, want about 3600", got)
	}
	if also.Load() == 0 {
		t.Errorf("Also never ran")
	}
}
