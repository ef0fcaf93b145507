package dlqreplay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/deadletter"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
)

// sizeLimitConfig is the topic config that bounds a record batch: the broker refuses a
// larger one with MESSAGE_TOO_LARGE, a rejection of the record (docs/adr/0005), which
// the relay counts towards the DLQ. A limit below every record makes the broker refuse
// them all, as a topic misconfigured by an operator would.
const sizeLimitConfig = "max.message.bytes"

// refusingLimit is below the smallest record batch there is: a batch's header alone
// takes 61 bytes.
const refusingLimit = "1"

// A dlqReplay is the dlq-replay scenario.
type dlqReplay struct {
	// Windows is how many times the topic refuses every record, each for Window; the
	// first starts FirstWindow after the load does, the next ones Every apart. They
	// all end before the load's last payment is sent.
	Windows     int
	Window      time.Duration
	FirstWindow time.Duration
	Every       time.Duration
	// StepGap is the load's wait before each step of a payment's plan
	// (load.Config.StepGap): a payment keeps getting events for a few seconds, during
	// a window and after it, while its dead letters wait and are replayed.
	StepGap time.Duration
	// ReplayEvery is how often, outside the windows, the harness replays the dead
	// letters it finds.
	ReplayEvery time.Duration
	// Settle bounds how long after the load the harness waits for the last dead
	// letters to be replayed and published.
	Settle time.Duration

	admin deadletter.Admin
	// foreign are the early copies' positions (earlycopy.go), for the verifier and the
	// topic watch to leave out.
	foreign *verify.ForeignRecords

	mu sync.Mutex
	// windows are the refusal windows so far; EndS is -1 while one is open.
	windows []faults.Window
	// windowsDone is closed once the last window has ended (or the run ended first);
	// made by Scenario.
	windowsDone chan struct{}
	// streamHolder is the pid of the walsender that the first replica's relay streams
	// through, noted while the second replica was stopped (CDC only; 0 otherwise).
	streamHolder int
	// replays records what the replayer saw and did (replayer.go), copies the early
	// copies it published (earlycopy.go).
	replays replayLog
	copies  []earlyCopy
	// loadEvents are the events the API answered as committed during the load.
	loadEvents []load.CommittedEvent
	// topic is the topic as the verifier reads it after the drain; topicErr says why it
	// could not be read.
	topic    verify.TopicContents
	topicErr error
}

// sendLoad is the run's load with each payment's plan spread StepGap apart.
func (d *dlqReplay) sendLoad(ctx context.Context, _ *harness.Run, cfg load.Config) (load.Result, error) {
	cfg.StepGap = d.StepGap
	res, err := load.Run(ctx, cfg)
	d.mu.Lock()
	d.loadEvents = res.Events
	d.mu.Unlock()
	return res, err
}

// arrangeStream makes the first replica's relay the one that streams from the slot,
// as PostgreSQL shows it from outside: with both replicas stopped no session holds the
// slot, so the walsender that holds it once the first replica alone is started is that
// replica's; the second then starts and waits for the slot. The polling relay streams
// nothing, and both replicas keep running as they are.
func (d *dlqReplay) arrangeStream(ctx context.Context, rn *harness.Run, _ *verify.Verifier, _ *verdict.Report) (int, error) {
	if rn.RelayMode != verdict.RelayModeCDC {
		return 0, nil
	}
	conn, err := pgx.Connect(ctx, rn.PaymentsDB)
	if err != nil {
		return 0, fmt.Errorf("connect to the payments database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, p := range []*stack.Process{rn.Replica, rn.API} {
		if err := p.Stop(15 * time.Second); err != nil {
			return 0, fmt.Errorf("stop %s: %w", p.Name, err)
		}
	}
	rn.Disrupted("both replicas stopped (SIGTERM)", "so that the first one started takes the replication slot")
	if _, err := waitSlot(ctx, conn, false); err != nil {
		return 0, err
	}
	if err := rn.StartAPI(ctx); err != nil {
		return 0, err
	}
	holder, err := waitSlot(ctx, conn, true)
	if err != nil {
		return 0, err
	}
	rn.Disrupted(rn.API.Name+" started alone and streams from the slot", fmt.Sprintf("walsender pid %d", holder))
	if err := rn.Replica.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", rn.Replica.Name, err)
	}
	if err := rn.Replica.WaitHealthy(ctx); err != nil {
		return 0, err
	}
	rn.Disrupted(rn.Replica.Name+" started, waiting for the slot", "")
	d.mu.Lock()
	d.streamHolder = holder
	d.mu.Unlock()
	return 0, nil
}

// waitSlot waits, at most a minute, until the run's replication slot is held by a
// session (active) or by none, and returns the holder's walsender pid (0 for none).
func waitSlot(ctx context.Context, conn *pgx.Conn, active bool) (int, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		pid, err := slotHolder(ctx, conn)
		if err != nil {
			return 0, err
		}
		if (pid != 0) == active {
			return pid, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the replication slot's holder is pid %d after a minute, want it held: %t", pid, active)
		}
		if err := backoff.Until(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return 0, err
		}
	}
}

// slotHolder returns the pid of the walsender that streams from the run's replication
// slot (the database's one), or 0 when no session holds it or there is no slot.
func slotHolder(ctx context.Context, conn *pgx.Conn) (int, error) {
	var pid int
	err := conn.QueryRow(ctx, `
		SELECT coalesce(max(active_pid), 0) FROM pg_replication_slots
		WHERE database = current_database() AND active`).Scan(&pid)
	if err != nil {
		return 0, fmt.Errorf("read the replication slot's holder: %w", err)
	}
	return pid, nil
}

// disrupt runs the refusal windows on their schedule and, beside them, the replayer
// until ctx ends; then it reads the topic, the relay's records alone, for the rows.
func (d *dlqReplay) disrupt(ctx context.Context, rn *harness.Run) error {
	conn, err := pgx.Connect(ctx, rn.PaymentsDB)
	if err != nil {
		return fmt.Errorf("connect to the payments database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	copies, err := newCopier(rn, d.foreign)
	if err != nil {
		return err
	}
	defer copies.close()
	var wg sync.WaitGroup
	var replayErr error
	wg.Go(func() { replayErr = d.replayUntilDone(ctx, rn, conn, copies) })
	windowErr := d.refuseInWindows(ctx, rn)
	wg.Wait()

	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	topic, err := verify.ReadTopicExcept(readCtx, rn.Brokers, rn.Topic, d.foreign, rn.KafkaOpts...)
	d.mu.Lock()
	d.topic, d.topicErr = topic, err
	d.mu.Unlock()
	if windowErr != nil {
		return windowErr
	}
	return replayErr
}

// refuseInWindows lowers the topic's limit below every record for each window and
// restores it, even when ctx ends in a window, then closes windowsDone.
func (d *dlqReplay) refuseInWindows(ctx context.Context, rn *harness.Run) error {
	defer close(d.windowsDone)
	start := time.Now()
	for i := range d.Windows {
		if backoff.Until(ctx, start.Add(d.FirstWindow+time.Duration(i)*d.Every)) != nil {
			return nil
		}
		if err := rn.SetTopicConfig(ctx, sizeLimitConfig, refusingLimit); err != nil {
			return err
		}
		d.mu.Lock()
		d.windows = append(d.windows, faults.Window{Kind: "records_refused", StartS: time.Since(rn.Origin).Seconds(), EndS: -1})
		d.mu.Unlock()
		rn.Disrupted("topic refuses every record as too large", fmt.Sprintf("%s=%s", sizeLimitConfig, refusingLimit))
		waitErr := backoff.Until(ctx, time.Now().Add(d.Window))
		restoreCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := rn.SetTopicConfig(restoreCtx, sizeLimitConfig, "")
		cancel()
		if err != nil {
			return err
		}
		d.mu.Lock()
		d.windows[len(d.windows)-1].EndS = time.Since(rn.Origin).Seconds()
		d.mu.Unlock()
		rn.Disrupted("topic takes records again", sizeLimitConfig+" back to the broker's default")
		if waitErr != nil {
			return nil
		}
	}
	return nil
}

// windowOpen reports whether the topic refuses records now.
func (d *dlqReplay) windowOpen() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.windows) > 0 && d.windows[len(d.windows)-1].EndS < 0
}

// settle runs after the load: it waits for the last window to end, then until no event
// is dead-lettered or replayed and unpublished, while the replayer replays what is
// left, for at most Settle. The drain the runner then waits for is the replays'.
func (d *dlqReplay) settle(ctx context.Context, rn *harness.Run) error {
	select {
	case <-d.windowsDone:
	case <-ctx.Done():
		return ctx.Err()
	}
	conn, err := pgx.Connect(ctx, rn.PaymentsDB)
	if err != nil {
		return fmt.Errorf("connect to the payments database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(d.Settle)
	for {
		var left int
		err := conn.QueryRow(ctx, `
			SELECT count(*) FROM outbox_events e
			WHERE e.status = 'failed'
			   OR (e.status = 'pending' AND EXISTS (SELECT 1 FROM outbox_dlq q WHERE q.event_id = e.id))`).Scan(&left)
		switch {
		case err != nil:
			return fmt.Errorf("count the dead letters left: %w", err)
		case left == 0:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%d dead letters still failed or replayed and unpublished %s after the load", left, d.Settle)
		}
		if err := backoff.Until(ctx, time.Now().Add(200*time.Millisecond)); err != nil {
			return err
		}
	}
}
