package chaos

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dscourse/payments-outbox/migrations"
)

// Options configure one run of a scenario on the native stack.
type Options struct {
	// Root is the repository root (go.mod, scripts/stack, bin/, reports/). Required.
	Root string
	// Payments to send. Default 100.
	Payments int
	// ReportDir receives chaos-<scenario>.json. Default <Root>/reports.
	ReportDir string
	// Binaries maps "./cmd/api" and "./cmd/consumer" to built binaries; Prepare
	// builds them when nil.
	Binaries map[string]string
	// AdminURL is the PostgreSQL admin URL. Default NativeAdminURL.
	AdminURL string
	Logger   *slog.Logger
	// Out receives the verdict table. Default io.Discard.
	Out io.Writer
	// Target, when set, points the run at a service somebody else started (a
	// student's implementation): nothing is built, started or created, and only the
	// scenarios that break the network (default, kafka-down) can run.
	Target *Target
}

// Target is an implementation that keeps docs/contract.md, already running, whose
// relay reaches Kafka through the native Toxiproxy (seed brokers 127.0.0.1:29092).
type Target struct {
	APIURL     string
	PaymentsDB string
	ConsumerDB string // optional
	Brokers    []string
	Topic      string
}

func (o Options) withDefaults() Options {
	o.Payments = cmp.Or(o.Payments, 100)
	o.ReportDir = cmp.Or(o.ReportDir, filepath.Join(o.Root, "reports"))
	o.AdminURL = cmp.Or(o.AdminURL, NativeAdminURL)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return o
}

// A Run is one scenario's services and disruption tools; Disrupt functions get it.
type Run struct {
	Stack    *NativeStack
	Faults   *Faults
	API      *Process
	Consumer *Process

	logger     *slog.Logger
	origin     time.Time
	loadEndS   float64
	paymentsDB string
	consumerDB string
	brokers    []string
	logDir     string

	mu          sync.Mutex
	disruptions []Disruption
	// bankedFailures holds the publish-failure counts of API processes that were
	// killed: their counters die with them.
	bankedFailures int
	dualWrite      bool
}

// RunScenario runs one scenario on the native stack and returns its report, which it
// has also printed to opts.Out and written to <ReportDir>/chaos-<name>.json. The error
// is for a harness failure (a server that would not start); a failed SLO is a report
// with Pass false.
func RunScenario(ctx context.Context, opts Options, stack *NativeStack, sc Scenario) (*Report, error) {
	opts = opts.withDefaults()
	logger := opts.Logger.With("scenario", sc.Name)
	origin := time.Now()
	runID := fmt.Sprintf("chaos-%s-%d", sc.Name, origin.Unix())
	dbBase := strings.ReplaceAll(fmt.Sprintf("chaos_%s_%d", sc.Name, origin.Unix()), "-", "_")
	report := &Report{
		Scenario: sc.Name, Stack: Native, RunID: runID, StartedAt: origin.UTC(),
		Topic:            "payments.events." + runID,
		PaymentsDatabase: dbBase + "_payments",
		ConsumerDatabase: dbBase + "_antifraud",
		PaymentsSent:     opts.Payments,
	}

	setupCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	faults, err := NewFaults(ToxiproxyAPI, RelayProxy, origin, logger)
	if err != nil {
		return nil, err
	}
	if err := faults.Reset(); err != nil {
		return nil, err
	}
	var rn *Run
	if opts.Target != nil {
		rn, err = targetRun(opts, sc, report)
	} else {
		rn, err = startServices(setupCtx, opts, sc, report)
	}
	if rn != nil {
		defer rn.stopServices(logger)
	}
	if err != nil {
		return nil, err
	}
	rn.Stack, rn.Faults, rn.logger, rn.origin, rn.dualWrite = stack, faults, logger, origin, sc.DualWrite
	faults.CountFailures(rn.failedPublishAttempts)

	verifier, err := NewVerifier(ctx, VerifyConfig{PaymentsDB: rn.paymentsDB, ConsumerDB: rn.consumerDB, Brokers: rn.brokers, Topic: report.Topic})
	if err != nil {
		return nil, err
	}
	defer verifier.Close()

	// Warm up: one payment, published before any fault. A Kafka client that has never
	// fetched metadata cannot even learn where to send records while acks are being
	// dropped, so without this the first lost-acks window writes nothing and produces
	// no duplicates: the run would be invalid for a reason that teaches nothing.
	warm, err := RunLoad(setupCtx, LoadConfig{BaseURL: rn.API.BaseURL, RunID: runID + "-warmup", Payments: 1})
	if err != nil || warm.Accepted != 1 {
		return nil, fmt.Errorf("warm-up payment not accepted (%v): %w", warm.RejectReasons, err)
	}
	if _, err := verifier.WaitDrain(setupCtx, time.Now()); err != nil {
		return nil, fmt.Errorf("warm-up event not published: %w", err)
	}
	report.WarmupPayments = 1

	// Disrupt, load, drain, observe; then stop disrupting.
	disruptCtx, stopDisrupt := context.WithCancel(ctx)
	defer stopDisrupt()
	disruptDone := make(chan error, 1)
	go func() {
		// A negative LoadDelay starts the disruption in the middle of the load.
		if waitUntil(disruptCtx, time.Now().Add(-sc.LoadDelay)) != nil {
			disruptDone <- nil
			return
		}
		disruptDone <- sc.Disrupt(disruptCtx, rn)
	}()
	if err := waitUntil(ctx, time.Now().Add(sc.LoadDelay)); err != nil {
		return nil, err
	}
	loadCfg := LoadConfig{BaseURL: rn.API.BaseURL, RunID: runID, Payments: opts.Payments, Span: sc.Span, Bursts: sc.Bursts}
	logger.Info("sending payments", "payments", opts.Payments, "span", sc.Span, "bursts", sc.Bursts)
	load, err := RunLoad(ctx, loadCfg)
	if err != nil {
		return nil, fmt.Errorf("run load: %w", err)
	}
	rn.loadEndS = load.Ended.Sub(origin).Seconds()
	logger.Info("load done", "accepted", load.Accepted, "rejected", load.Rejected, "retries", load.Retries)

	report.DrainSeconds, err = verifier.WaitDrain(ctx, load.Ended)
	if err != nil {
		report.Notes = append(report.Notes, err.Error())
	}
	logger.Info("drain done", "drain_seconds", report.DrainSeconds)
	obs, obsErr := verifier.Observe(ctx)
	// The publish failures are read before the disruption ends, while the last API
	// process still holds its counters.
	report.FailedPublishAttempts, _ = rn.failedPublishAttempts()
	stopDisrupt()
	if err := <-disruptDone; err != nil {
		return nil, fmt.Errorf("disruption: %w", err)
	}
	if err := faults.Reset(); err != nil {
		return nil, err
	}
	if obsErr != nil {
		return nil, obsErr
	}

	obs.Fill(report)
	report.APIAccepted, report.APIRejected, report.APIRetries = load.Accepted, load.Rejected, load.Retries
	for reason, n := range load.RejectReasons {
		report.Notes = append(report.Notes, fmt.Sprintf("%d payments rejected: %s", n, reason))
	}
	report.LatencyMS = load.Percentiles()
	report.FaultWindows = faults.Windows()
	report.Disruptions = rn.Disruptions()
	report.Checks = append(sc.Validity(report, rn), sloChecks(report, sc.DualWrite)...)
	report.DurationSeconds = time.Since(origin).Seconds()
	report.Judge()

	report.PrintTable(opts.Out)
	path := filepath.Join(opts.ReportDir, "chaos-"+sc.Name+".json")
	if err := report.Write(path); err != nil {
		return report, err
	}
	fmt.Fprintf(opts.Out, "  report: %s; service logs: %s\n", path, rn.logDir)
	if report.Pass && opts.Target == nil {
		// Keep the evidence of a failed run; clean up after a passed one.
		rn.stopServices(logger)
		cleanCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, db := range []string{report.PaymentsDatabase, report.ConsumerDatabase} {
			if err := DropDatabase(cleanCtx, opts.AdminURL, db); err != nil {
				logger.Warn("drop database of a passed run", "err", err)
			}
		}
		if err := DeleteTopic(cleanCtx, rn.brokers, report.Topic); err != nil {
			logger.Warn("delete topic of a passed run", "err", err)
		}
	} else if opts.Target == nil {
		fmt.Fprintf(opts.Out, "  kept for inspection: databases %s, %s; topic %s\n", report.PaymentsDatabase, report.ConsumerDatabase, report.Topic)
	}
	return report, nil
}

// startServices creates the run's fresh databases and topic and starts the consumer
// and the API built from this repository. Nothing left over from an earlier run can
// pass for this run's events.
func startServices(ctx context.Context, opts Options, sc Scenario, report *Report) (*Run, error) {
	paymentsURL, err := CreateDatabase(ctx, opts.AdminURL, report.PaymentsDatabase, migrations.Payments)
	if err != nil {
		return nil, err
	}
	consumerURL, err := CreateDatabase(ctx, opts.AdminURL, report.ConsumerDatabase, migrations.Antifraud)
	if err != nil {
		return nil, err
	}
	brokers := []string{DirectBroker}
	if err := CreateTopic(ctx, brokers, report.Topic, 3); err != nil {
		return nil, err
	}
	logDir := filepath.Join(opts.Root, ".stack", "chaos", report.RunID)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	apiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	consumerAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	rn := &Run{
		paymentsDB: paymentsURL, consumerDB: consumerURL, brokers: brokers, logDir: logDir,
		API: &Process{
			Name: "api", Path: opts.Binaries["./cmd/api"], LogPath: filepath.Join(logDir, "api.log"), BaseURL: "http://" + apiAddr,
			Env: append([]string{
				"DATABASE_URL=" + paymentsURL,
				"KAFKA_BROKERS=" + ProxiedBroker, // the relay stays behind Toxiproxy
				"KAFKA_TOPIC=" + report.Topic,
				"HTTP_ADDR=" + apiAddr,
				fmt.Sprintf("DUAL_WRITE=%t", sc.DualWrite),
			}, append(relayEnv, sc.APIEnv...)...),
		},
		Consumer: &Process{
			Name: "consumer", Path: opts.Binaries["./cmd/consumer"], LogPath: filepath.Join(logDir, "consumer.log"), BaseURL: "http://" + consumerAddr,
			Env: append([]string{
				"DATABASE_URL=" + consumerURL,
				"KAFKA_BROKERS=" + DirectBroker,
				"KAFKA_TOPIC=" + report.Topic,
				"KAFKA_GROUP=antifraud-" + report.RunID,
				"HTTP_ADDR=" + consumerAddr,
			}, sc.ConsumerEnv...),
		},
	}
	if err := rn.Consumer.Start(); err != nil {
		return rn, err
	}
	if err := rn.API.Start(); err != nil {
		return rn, err
	}
	for _, p := range []*Process{rn.API, rn.Consumer} {
		if err := p.WaitHealthy(ctx); err != nil {
			return rn, err
		}
	}
	opts.Logger.Info("services up", "api", rn.API.BaseURL, "consumer", rn.Consumer.BaseURL, "logs", logDir)
	return rn, nil
}

// targetRun wraps a service that somebody else runs.
func targetRun(opts Options, sc Scenario, report *Report) (*Run, error) {
	t := opts.Target
	if sc.Name != "default" && sc.Name != "kafka-down" {
		return nil, fmt.Errorf("scenario %s needs to kill or restart the services; against -api-url only default and kafka-down run", sc.Name)
	}
	report.Stack = "external"
	report.Topic, report.PaymentsDatabase, report.ConsumerDatabase = t.Topic, redact(t.PaymentsDB), redact(t.ConsumerDB)
	return &Run{
		paymentsDB: t.PaymentsDB, consumerDB: t.ConsumerDB, brokers: t.Brokers, logDir: "(not ours)",
		API:      &Process{Name: "api", BaseURL: strings.TrimRight(t.APIURL, "/")},
		Consumer: &Process{Name: "consumer"},
	}, nil
}

// redact drops the password from a database URL before it goes into a report.
func redact(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil || dbURL == "" {
		return ""
	}
	return u.Redacted()
}

// sloChecks are the course's SLOs, made exact. The dual-write run inverts the lost
// check: it passes when it shows the loss it exists to show.
func sloChecks(r *Report, dualWrite bool) []Check {
	lost := check(SLO, "lost (no event or no decision)", "0", fmt.Sprintf("%d (no event %d, no decision %d)", r.Lost, r.LostNoEvent, r.LostNoDecision), r.Lost == 0)
	if dualWrite {
		lost = check(SLO, "lost: the anti-pattern loses events", "> 0", fmt.Sprintf("%d (no event %d, no decision %d)", r.Lost, r.LostNoEvent, r.LostNoDecision), r.Lost > 0)
	}
	checks := []Check{
		lost,
		check(SLO, "phantom (event or decision, no payment)", "0", r.Phantom, r.Phantom == 0),
		check(SLO, "duplicate effects (payments with >1 decision)", "0", r.DuplicateEffects, r.DuplicateEffects == 0),
		check(SLO, "api accepted every payment", fmt.Sprint(r.PaymentsSent), r.APIAccepted, r.APIAccepted == r.PaymentsSent),
		check(SLO, "committed == accepted + warm-up (idempotency)", fmt.Sprint(r.APIAccepted+r.WarmupPayments), r.PaymentsCommitted, r.PaymentsCommitted == r.APIAccepted+r.WarmupPayments),
	}
	if !dualWrite {
		checks = append(checks,
			check(SLO, "dlq", "0", r.DLQ, r.DLQ == 0),
			check(SLO, "drain_seconds", "<= 300", fmt.Sprintf("%.1f", r.DrainSeconds), r.DrainSeconds >= 0 && r.DrainSeconds <= 300),
		)
	}
	return checks
}

// StartAPI starts an API process and waits for its /healthz.
func (rn *Run) StartAPI(ctx context.Context) error {
	if err := rn.API.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return rn.API.WaitHealthy(ctx)
}

// KillAPI banks the API's failure counters, then SIGKILLs it. Failures between the
// scrape and the kill are not counted, so the total is a lower bound.
func (rn *Run) KillAPI() error {
	if n, ok := rn.scrapeFailures(); ok {
		rn.mu.Lock()
		rn.bankedFailures += n
		rn.mu.Unlock()
	}
	return rn.API.Kill()
}

// failedPublishAttempts is the run's total of failed publish attempts so far.
func (rn *Run) failedPublishAttempts() (int, bool) {
	n, ok := rn.scrapeFailures()
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.bankedFailures + n, ok
}

// scrapeFailures reads the live API's counters: the relay's publish failures, and in
// dual-write mode the handler's failed publishes, which it logs (the teaching mode
// has no registry of its own, see internal/dualwrite).
func (rn *Run) scrapeFailures() (int, bool) {
	if rn.dualWrite {
		b, err := os.ReadFile(rn.API.LogPath)
		if err != nil {
			return 0, false
		}
		return bytes.Count(b, []byte(dualWriteFailureLog)), true
	}
	n, ok, err := ScrapeCounter(context.Background(), rn.API.BaseURL+"/metrics", "outbox_publish_failures_total")
	return n, ok && err == nil
}

// dualWriteFailureLog is the message internal/dualwrite logs when a publish fails.
const dualWriteFailureLog = "dual write: publish failed"

// leasedRows counts outbox rows claimed by a relay and not yet published: the rows a
// kill leaves behind for the lease to expire.
func (rn *Run) leasedRows(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rn.paymentsDB)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'pending' AND lease_expires_at > now()`).Scan(&n)
	if err != nil {
		return -1
	}
	return n
}

// disrupted records a disruption at the current time.
func (rn *Run) disrupted(what, detail string) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.disruptions = append(rn.disruptions, Disruption{What: what, AtSeconds: time.Since(rn.origin).Seconds(), Detail: detail})
	rn.logger.Info("disruption", "what", what, "detail", detail)
}

// Disruptions returns what was done so far.
func (rn *Run) Disruptions() []Disruption {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return append([]Disruption(nil), rn.disruptions...)
}

// countDisruptions counts disruptions named what, and among them those whose detail
// reports rows in flight ("N rows leased ..." with N > 0).
func (rn *Run) countDisruptions(what string) (all, busy int) {
	for _, d := range rn.Disruptions() {
		if d.What != what {
			continue
		}
		all++
		var n int
		if _, err := fmt.Sscanf(d.Detail, "%d rows", &n); err == nil && n > 0 {
			busy++
		}
	}
	return all, busy
}

// stopServices stops the API first (it stops taking payments, then its relay), then
// the consumer. Safe to call twice.
func (rn *Run) stopServices(logger *slog.Logger) {
	for _, p := range []*Process{rn.API, rn.Consumer} {
		if err := p.Stop(15 * time.Second); err != nil && !errors.Is(err, os.ErrProcessDone) {
			logger.Warn("stop service", "service", p.Name, "err", err)
		}
	}
}
