package harness

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/backoff"
	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
)

// Options configure one run of a scenario on the native stack.
type Options struct {
	// Root is the repository root (go.mod, scripts/stack, bin/, reports/). Required.
	Root string
	// Payments to send. Default 100.
	Payments int
	// ReportDir receives chaos-<scenario>.json. Default <Root>/reports for our own
	// service, whose reports are committed; <Root>/.stack/chaos-reports (not tracked by
	// git) when Target or Commands point at someone else's, so that checking a student's
	// service leaves the mentor's checkout unmodified.
	ReportDir string
	// Binaries maps "./cmd/api" and "./cmd/consumer" to built binaries (Build makes
	// them). Required unless Target or Commands is set.
	Binaries map[string]string
	// Ports are the native stack's ports (devstack.LoadPorts). Default
	// devstack.DefaultPorts().
	Ports devstack.Ports
	// AdminURL is the PostgreSQL admin URL. Default Ports.AdminURL().
	AdminURL string
	// Logger receives the run's progress. Default: discarded.
	Logger *slog.Logger
	// Out receives the verdict table. Default io.Discard.
	Out io.Writer
	// Target, when set, points the run at a service somebody else started (a
	// student's implementation): nothing is built, started or created, and only the
	// scenarios that break the network (default, kafka-down) can run.
	Target *Target
	// Commands, when set, start a student's API and consumer instead of our binaries:
	// the harness creates their empty databases and topic and owns the processes, so
	// every scenario but dual-write runs. Not with Target.
	Commands *ServiceCommands
	// APIKey is sent as "Authorization: Bearer <key>" with every request to a student's
	// API (Target or Commands); empty, none. For ours the harness makes a key itself.
	APIKey string
	// RelayMode is the RELAY_MODE our API runs with: "poll" (the default) or "cdc"
	// (make chaos RELAY_MODE=cdc). Reports of cdc runs are written as
	// chaos-<scenario>-cdc.json, beside the polling relay's. Only for our binaries: a
	// student's service has its own relay.
	RelayMode string
}

// Target is an implementation that keeps docs/contract.md, already running, whose
// relay reaches Kafka through the native Toxiproxy (seed brokers
// devstack.Ports.ProxiedBroker, 127.0.0.1:29092 by default).
type Target struct {
	APIURL     string
	PaymentsDB string
	ConsumerDB string // optional
	Brokers    []string
	Topic      string
	// KafkaOpts are the franz-go options that reach Brokers besides the address: TLS
	// and SASL (cmd/chaos's -kafka-* flags). Empty: plaintext.
	KafkaOpts []kgo.Opt
	// Stack is what the report calls where the service runs. Default "external";
	// compose.Run sets "compose".
	Stack string
}

// WithDefaults returns the options with every default filled in, as a run uses them.
func (o Options) WithDefaults() Options {
	o.Payments = cmp.Or(o.Payments, 100)
	if o.ReportDir == "" {
		o.ReportDir = filepath.Join(o.Root, "reports")
		if o.Target != nil || o.Commands != nil {
			o.ReportDir = filepath.Join(o.Root, ".stack", "chaos-reports")
		}
	}
	o.Ports = cmp.Or(o.Ports, devstack.DefaultPorts())
	o.AdminURL = cmp.Or(o.AdminURL, o.Ports.AdminURL())
	o.RelayMode = cmp.Or(o.RelayMode, verdict.RelayModePoll)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o
}

// ReportDirectory is where the runs write their reports: ReportDir or its default.
func (o Options) ReportDirectory() string { return o.WithDefaults().ReportDir }

// RunScenario runs one scenario on the native stack and returns its report, which it
// has also printed to opts.Out and written to <ReportDir>/chaos-<name>.json. The error
// is for a harness failure (a server that would not start); a failed SLO is a report
// with Pass false.
//
// A run is set up (fresh databases, topic and services, no fault), warmed up with a few
// payments one after another, then loaded while the scenario disrupts it; the outcome
// is observed before the disruption stops, judged against the validity and SLO checks,
// and cleaned up only if it passed.
func RunScenario(ctx context.Context, opts Options, native *stack.Native, sc Scenario) (*verdict.Report, error) {
	opts = opts.WithDefaults()
	if sc.Payments > 0 {
		opts.Payments = sc.Payments
	}
	logger := opts.Logger.With(slog.String("scenario", sc.Name))
	if sc.Prepare != nil {
		env, err := sc.Prepare(opts.Ports)
		if err != nil {
			return nil, fmt.Errorf("prepare scenario %s: %w", sc.Name, err)
		}
		sc.APIEnv = append(slices.Clip(sc.APIEnv), env...)
	}
	origin := time.Now()
	report := newReport(sc, origin, opts.Payments)
	if opts.Target == nil && opts.Commands == nil {
		report.RelayMode = opts.RelayMode
	}

	// One budget for everything before the load: services and warm-up.
	setupCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if sc.Postgres != nil && opts.Target == nil {
		adminURL, stop, err := sc.Postgres(setupCtx, opts.Root, logger)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: start its PostgreSQL: %w", sc.Name, err)
		}
		// Registered before the services' stop, so it runs after it.
		defer func() { stop(report.Pass) }()
		opts.AdminURL = adminURL
	}
	rn, err := setUp(setupCtx, opts, native, sc, report, origin, logger)
	if rn != nil {
		defer func() {
			rn.stopServices(logger)
			// After the API has stopped, pass or fail: a kept database is evidence,
			// but a kept slot would hold the server's WAL for every other user.
			dropReplicationSlots(context.WithoutCancel(ctx), opts.AdminURL, report.PaymentsDatabase, logger)
		}()
	}
	if err != nil {
		return nil, err
	}
	verifier, err := verify.New(ctx, verify.Config{PaymentsDB: rn.PaymentsDB, ConsumerDB: rn.ConsumerDB, Brokers: rn.Brokers, KafkaOpts: rn.KafkaOpts, Topic: report.Topic, Foreign: sc.Foreign})
	if err != nil {
		return nil, err
	}
	defer verifier.Close()
	if err := warmUp(setupCtx, rn, verifier, report); err != nil {
		return nil, err
	}
	if sc.BeforeLoad != nil {
		payments, err := sc.BeforeLoad(setupCtx, rn, verifier, report)
		report.WarmupPayments += payments
		if err != nil {
			return nil, fmt.Errorf("scenario %s before the load: %w", sc.Name, err)
		}
	}

	res, observed, err := loadUnderDisruption(ctx, opts, sc, rn, verifier, report)
	if err != nil {
		return nil, err
	}
	judge(report, sc, rn, res, observed, origin)
	if err := writeReport(opts, report, rn); err != nil {
		return report, err
	}
	cleanUp(ctx, opts, rn, report, logger)
	return report, nil
}

// newReport names what the run creates after the scenario and its start time, so that
// nothing left over from an earlier run can pass for this run's events.
func newReport(sc Scenario, origin time.Time, payments int) *verdict.Report {
	runID := fmt.Sprintf("chaos-%s-%d", sc.Name, origin.Unix())
	dbBase := strings.ReplaceAll(fmt.Sprintf("chaos_%s_%d", sc.Name, origin.Unix()), "-", "_")
	return &verdict.Report{
		Scenario: sc.Name, Stack: stack.NativeKind, RunID: runID, StartedAt: origin.UTC(),
		Topic:            "payments.events." + runID,
		PaymentsDatabase: dbBase + "_payments",
		ConsumerDatabase: dbBase + "_antifraud",
		PaymentsSent:     payments,
	}
}

// setUp clears every fault, then starts the services (or wraps the target's) and wires
// the Run the disruption gets. The Run it returns, even with an error, has services to
// stop.
func setUp(ctx context.Context, opts Options, native *stack.Native, sc Scenario, report *verdict.Report, origin time.Time, logger *slog.Logger) (*Run, error) {
	if err := checkRunnable(opts, sc); err != nil {
		return nil, err
	}
	proxy := devstack.RelayProxy
	if sc.Cluster {
		// Reset clears every proxy; a cluster scenario that cuts one broker off makes
		// Faults of its own for that broker's proxy (partitionOffline).
		proxy = devstack.ClusterProxy(1)
	}
	toxics, err := faults.New(opts.Ports.ToxiproxyAPI(), proxy, origin, logger)
	if err != nil {
		return nil, err
	}
	if err := toxics.Reset(); err != nil {
		return nil, err
	}
	if err := ensurePostgresProxies(opts.Ports, sc); err != nil {
		return nil, err
	}
	var rn *Run
	if opts.Target != nil {
		rn, err = targetRun(opts, sc, report)
	} else {
		rn, err = startServices(ctx, opts, sc, report)
	}
	if err != nil {
		return rn, err
	}
	rn.Stack, rn.Faults, rn.Logger, rn.Origin, rn.dualWrite = native, toxics, logger, origin, sc.DualWrite
	toxics.CountFailures(rn.FailedPublishAttempts)
	if sc.Cluster {
		// ctx is the set-up's budget; the watch outlives it, until stopServices stops it.
		rn.Cluster, err = faults.StartClusterWatch(context.WithoutCancel(ctx), rn.Brokers, rn.Topic, rn.Group, origin, logger)
	}
	return rn, err
}

// ensurePostgresProxies creates the Toxiproxy proxies in front of PostgreSQL that the
// scenario sends our services through (Scenario.APIThroughPostgresProxy,
// ConsumerThroughPostgresProxy) when the stack was started before they existed; Reset
// has left every existing one clean.
func ensurePostgresProxies(ports devstack.Ports, sc Scenario) error {
	if sc.APIThroughPostgresProxy {
		if _, err := faults.PostgresProxy(ports); err != nil {
			return err
		}
	}
	if sc.ConsumerThroughPostgresProxy {
		if _, err := faults.ConsumerPostgresProxy(ports); err != nil {
			return err
		}
	}
	return nil
}

// warmUpPayments is how many payments the warm-up sends, one after another. A Kafka
// client that has never produced cannot even learn where to send records while acks
// are being dropped (its metadata, producer id and produce connection all wait on
// answers), so it writes nothing in the first lost-acks window and produces no
// duplicates: the run would be invalid for a reason that teaches nothing. A relay may
// hold several clients: the reference relay holds one per worker (four), and a commit
// wakes the worker that has been idle longest (a Go channel hands a value to its
// waiting receivers in turn), so with a single warm-up payment the first burst often
// goes to workers that have never produced, and the short chaos test writes nothing in
// its lost-acks window, even on a quiet machine. Payments one after another
// reach the workers in turn; twice the reference relay's workers leaves room for a
// worker that its poll woke out of turn.
const warmUpPayments = 8

// warmUp sends warmUpPayments payments, each after the previous one's events were
// published, before any fault.
//
// It also captures the first one, to learn whether the service has the lifecycle
// endpoints (a MAY of docs/contract.md): with them the load sends every payment through
// its lifecycle, without them creations only, and the lifecycle rows are off.
func warmUp(ctx context.Context, rn *Run, verifier *verify.Verifier, report *verdict.Report) error {
	for i := range warmUpPayments {
		runID := fmt.Sprintf("%s-warmup-%d", report.RunID, i)
		warm, err := load.Run(ctx, load.Config{BaseURL: rn.API.BaseURL, RunID: runID, Payments: 1, APIKey: rn.APIKey})
		if err != nil || warm.Accepted != 1 {
			return fmt.Errorf("warm-up payment not accepted (%v): %w", warm.RejectReasons, err)
		}
		if i == 0 && !rn.dualWrite {
			report.LifecycleLoad = captureWorks(ctx, rn, warm.PaymentIDs[0], runID, report)
		}
		if _, err := verifier.WaitDrain(ctx, time.Now()); err != nil {
			return fmt.Errorf("warm-up event not published: %w", err)
		}
		report.WarmupPayments++
	}
	return nil
}

// captureWorks captures the payment id and reports whether the service answered 200;
// when it did not, a note says what it answered.
func captureWorks(ctx context.Context, rn *Run, id, runID string, report *verdict.Report) bool {
	client := load.NewAPIClient(10*time.Second, rn.APIKey)
	defer client.CloseIdleConnections()
	url := strings.TrimRight(rn.API.BaseURL, "/") + "/payments/" + id + "/capture"
	status, _, reason, _ := load.PostTransition(ctx, client, url, runID+"-capture", "")
	if status != http.StatusOK {
		report.Notes = append(report.Notes, fmt.Sprintf("the warm-up capture got %s: the load sends creations only, and the lifecycle rows are off", reason))
	}
	return status == http.StatusOK
}

// loadUnderDisruption starts the scenario's disruption, sends the load LoadDelay later,
// waits for the drain and observes the outcome; then it stops the disruption and clears
// the faults. A drain that never came is a note in the report, not an error: the checks
// will say what it left behind.
func loadUnderDisruption(ctx context.Context, opts Options, sc Scenario, rn *Run, verifier *verify.Verifier, report *verdict.Report) (load.Result, verify.Observed, error) {
	watch, err := faults.StartTopicWatch(ctx, faults.WatchConfig{Brokers: rn.Brokers, KafkaOpts: rn.KafkaOpts, Topic: report.Topic, CopyEvery: sc.CopyEvery, Origin: rn.Origin, Foreign: sc.Foreign, Logger: rn.Logger})
	if err != nil {
		return load.Result{}, verify.Observed{}, err
	}
	defer watch.Stop()
	sampler, err := startSampler(ctx, rn)
	if err != nil {
		return load.Result{}, verify.Observed{}, err
	}
	// The timeline ends when this returns: after the observation and the end of the
	// disruption, so its last samples show the run settled.
	defer func() { report.Timeline = sampler.Stop() }()
	// Closed when the load has been sent; set before the disruption starts, so that
	// its goroutine can read it (Run.Loading).
	loadDone := make(chan struct{})
	rn.loadDone = loadDone
	closeLoadDone := sync.OnceFunc(func() { close(loadDone) })
	defer closeLoadDone()
	stopDisruption, disruptionDone := startDisruption(ctx, sc, rn)
	defer stopDisruption()
	if err := backoff.Until(ctx, time.Now().Add(sc.LoadDelay)); err != nil {
		return load.Result{}, verify.Observed{}, err
	}
	rn.Logger.Info("sending payments", slog.Int("payments", opts.Payments), slog.Duration("span", sc.Span), slog.Int("bursts", sc.Bursts))
	urls := rn.apiURLs()
	// The dual-write handler ignores Idempotency-Key on purpose (its lesson is the lost
	// event), so the dual-write run sends no key from several clients at once.
	sameKey := sameKeyEvery
	if sc.DualWrite {
		sameKey = 0
	}
	send := func(ctx context.Context, _ *Run, cfg load.Config) (load.Result, error) { return load.Run(ctx, cfg) }
	if sc.Load != nil {
		send = sc.Load
	}
	res, err := send(ctx, rn, load.Config{BaseURL: urls[0], Replicas: urls[1:], RunID: report.RunID, APIKey: rn.APIKey, Payments: opts.Payments, Span: sc.Span, Bursts: sc.Bursts,
		LargestEvery: sc.LargestEvery, MaxAttempts: sc.MaxAttempts, Lifecycle: report.LifecycleLoad, SameKeyEvery: sameKey})
	closeLoadDone()
	if err != nil {
		return load.Result{}, verify.Observed{}, fmt.Errorf("run load: %w", err)
	}
	rn.LoadEndS = res.Ended.Sub(rn.Origin).Seconds()
	rn.Logger.Info("load done", slog.Int("accepted", res.Accepted), slog.Int("rejected", res.Rejected), slog.Int("retries", res.Retries))
	if sc.AfterLoad != nil {
		// A failed step is a note: the scenario's own rows say what it left undone.
		if err := sc.AfterLoad(ctx, rn); err != nil {
			report.Notes = append(report.Notes, "after the load: "+err.Error())
		}
	}

	if sc.FinishDisruption {
		rn.Logger.Info("waiting for the disruption's last step")
		select {
		case <-disruptionDone:
		case <-ctx.Done():
			return load.Result{}, verify.Observed{}, ctx.Err()
		}
	}
	report.DrainSeconds, err = verifier.WaitDrain(ctx, res.Ended)
	if err != nil {
		report.Notes = append(report.Notes, err.Error())
	}
	rn.Logger.Info("drain done", slog.Float64("drain_seconds", report.DrainSeconds))
	// Stop injecting copies first, then let the consumer read to the end of the topic,
	// copies included, before anything is observed.
	collectEvidence(ctx, rn, report, watch, res)
	if err := rn.waitConsumerCommitted(ctx, 2*time.Minute); err != nil {
		report.Notes = append(report.Notes, err.Error())
	}
	observed, observeErr := verifier.Observe(ctx)
	// The publish failures are read before the disruption ends, while the last API
	// process still holds its counters.
	report.FailedPublishAttempts, _ = rn.FailedPublishAttempts()
	if err := stopDisruption(); err != nil {
		return load.Result{}, verify.Observed{}, fmt.Errorf("disruption: %w", err)
	}
	if rn.Cluster != nil {
		report.Cluster = rn.Cluster.Evidence()
	}
	if err := rn.Faults.Reset(); err != nil {
		return load.Result{}, verify.Observed{}, err
	}
	if observeErr != nil {
		return load.Result{}, verify.Observed{}, observeErr
	}
	return res, observed, nil
}

// startDisruption runs sc.Disrupt in a goroutine of its own; a negative LoadDelay
// starts it that long after now, in the middle of the load. The returned function ends
// the disruption, waits for it and returns its error; calling it again returns the same.
// finished is closed when Disrupt has returned, by itself or stopped.
func startDisruption(ctx context.Context, sc Scenario, rn *Run) (stop func() error, finished <-chan struct{}) {
	ctx, cancel := context.WithCancel(ctx)
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if backoff.Until(ctx, time.Now().Add(-sc.LoadDelay)) != nil {
			return
		}
		err = sc.Disrupt(ctx, rn)
	}()
	return sync.OnceValue(func() error {
		cancel()
		<-done
		return err
	}), done
}

// judge fills the report with what the load and the verifier saw and decides the
// verdict: validity checks (the faults bit) first, then the SLOs and the contract. The
// ids the API answered with are checked too, so that a 201 whose payment was never
// committed counts as lost.
func judge(report *verdict.Report, sc Scenario, rn *Run, res load.Result, observed verify.Observed, origin time.Time) {
	observed.Accepted = res.PaymentIDs
	fillObserved(observed, report)
	report.APIAccepted, report.APIRejected, report.APIRetries = res.Accepted, res.Rejected, res.Retries
	report.Transitions = res.Transitions
	report.ServerErrors = res.ServerErrors
	report.SameKey = res.SameKey
	for reason, n := range res.Transitions.FailReasons {
		report.Notes = append(report.Notes, fmt.Sprintf("%d transition requests failed: %s", n, reason))
	}
	for reason, n := range res.RejectReasons {
		report.Notes = append(report.Notes, fmt.Sprintf("%d payments rejected: %s", n, reason))
	}
	report.LatencyMS = res.Percentiles()
	report.FaultWindows = rn.Faults.Windows()
	report.Disruptions = rn.Disruptions()
	report.Checks = sc.Checks(report, rn)
	report.DurationSeconds = time.Since(origin).Seconds()
	report.Judge()
}

// Checks are the verdict's rows, in table order: the scenario's validity rows (and its
// own SLO rows), then the SLOs, then the contract.
func (sc Scenario) Checks(report *verdict.Report, rn *Run) []verdict.Check {
	slo := sloChecks(report, sc.DualWrite)
	if sc.LosesAcknowledged {
		slo = lessonChecks(report)
	}
	checks := append(sc.Validity(report, rn), slo...)
	checks = append(checks, consumerDeadLettersCheck(rn, sc.Foreign))
	if rn != nil && rn.GroupTap != nil {
		checks = append(checks, nonOwnerCommitsCheck(rn))
	}
	return append(checks, contractChecks(report)...)
}

// writeReport prints the verdict table to opts.Out and writes the JSON report.
func writeReport(opts Options, report *verdict.Report, rn *Run) error {
	report.PrintTable(opts.Out)
	path := filepath.Join(opts.ReportDir, report.FileStem()+".json")
	if err := report.Write(path); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "  report: %s; service logs: %s\n", path, rn.logDir)
	return nil
}

// cleanUp stops the services and removes the databases and topic of a passed run. A
// failed run keeps them, as evidence; a target's belong to somebody else.
func cleanUp(ctx context.Context, opts Options, rn *Run, report *verdict.Report, logger *slog.Logger) {
	if opts.Target != nil {
		return
	}
	if !report.Pass {
		fmt.Fprintf(opts.Out, "  kept for inspection: databases %s, %s; topic %s\n", report.PaymentsDatabase, report.ConsumerDatabase, report.Topic)
		return
	}
	rn.stopServices(logger)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, db := range []string{report.PaymentsDatabase, report.ConsumerDatabase} {
		if err := devstack.DropDatabase(ctx, opts.AdminURL, db); err != nil {
			logger.Warn("drop database of a passed run", slog.Any("err", err))
		}
	}
	err := kafkasec.WithAdmin(rn.Brokers, rn.KafkaOpts, func(adm *kadm.Client) error { return devstack.DeleteTopic(ctx, adm, report.Topic) })
	if err != nil {
		logger.Warn("delete topic of a passed run", slog.Any("err", err))
	}
}
