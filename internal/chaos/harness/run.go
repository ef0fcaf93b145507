package harness

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/groupwatch"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/kafkasec"
	"github.com/dscourse/payments-outbox/migrations"
)

// A Run is one scenario's services and disruption tools; Disrupt functions get it.
// API and Consumer can be started and killed when the harness started them (ours, or a
// student's ServiceCommands); for a Target they only have a BaseURL.
type Run struct {
	Stack    *stack.Native
	Faults   *faults.Proxy
	API      *stack.Process
	Consumer *stack.Process
	// Consumers are every consumer instance started, Consumer the first
	// (Scenario.Consumers, AddConsumer).
	Consumers []*stack.Process
	// GroupTap sits between the consumer instances and the broker when the scenario
	// runs several (Scenario.Consumers); nil otherwise.
	GroupTap *groupwatch.Tap
	// Replica is a second API process on the same database, with a relay of its own;
	// nil unless the scenario asks for two (Scenario.Replicas).
	Replica *stack.Process

	// Ports are the native stack's (Options.Ports).
	Ports      devstack.Ports
	Logger     *slog.Logger
	Origin     time.Time
	LoadEndS   float64
	PaymentsDB string
	ConsumerDB string
	Brokers    []string
	logDir     string
	Topic      string
	// Group is the consumer Group the harness gave the consumer (KAFKA_GROUP); empty
	// for a consumer somebody else runs.
	Group string
	// KafkaOpts reach brokers besides the address (Target.KafkaOpts); empty for ours.
	KafkaOpts []kgo.Opt
	// loadDone is closed once the load has been sent (see Loading).
	loadDone <-chan struct{}
	// Cluster follows the three-node Cluster; nil unless the scenario runs on it.
	Cluster *faults.ClusterWatch

	mu          sync.Mutex
	disruptions []verdict.Disruption
	// bankedFailures holds the publish-failure counts of API processes that were
	// killed: their counters die with them.
	bankedFailures int
	dualWrite      bool
	// RelayMode is our API's RELAY_MODE (Report.RelayMode); empty for a student's.
	RelayMode string
	// APIKey goes with every request to the API (newAPIClient); empty: none.
	APIKey string
}

// startServices creates the run's fresh databases and topic and starts the consumer
// and the API: ours, built from this repository, or a student's from opts.Commands.
// Nothing left over from an earlier run can pass for this run's events. Ours get their
// schema here; a student's command prepares its own (it is given empty databases).
func startServices(ctx context.Context, opts Options, sc Scenario, report *verdict.Report) (*Run, error) {
	paymentsURL, err := devstack.CreateDatabase(ctx, opts.AdminURL, report.PaymentsDatabase)
	if err != nil {
		return nil, err
	}
	consumerURL, err := devstack.CreateDatabase(ctx, opts.AdminURL, report.ConsumerDatabase)
	if err != nil {
		return nil, err
	}
	apiKey := opts.APIKey
	if opts.Commands == nil {
		if err := devstack.MigrateDatabase(ctx, paymentsURL, migrations.Payments); err != nil {
			return nil, err
		}
		if err := devstack.MigrateDatabase(ctx, consumerURL, migrations.Antifraud); err != nil {
			return nil, err
		}
		if apiKey, err = load.CreateAPIKey(ctx, opts.Binaries["./cmd/api"], paymentsURL); err != nil {
			return nil, err
		}
	} else {
		report.Stack = "student's commands"
	}
	brokers, relayBrokers := []string{opts.Ports.DirectBroker()}, []string{opts.Ports.ProxiedBroker()}
	if sc.Cluster {
		brokers, relayBrokers = opts.Ports.ClusterBrokers(), opts.Ports.ClusterProxiedBrokers()
	}
	err = kafkasec.WithAdmin(brokers, nil, func(adm *kadm.Client) error { return devstack.CreateTopic(ctx, adm, report.Topic, 3) })
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(opts.Root, ".stack", "chaos", report.RunID)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	apiAddr, err := stack.FreeAddr()
	if err != nil {
		return nil, err
	}
	consumerAddr, err := stack.FreeAddr()
	if err != nil {
		return nil, err
	}
	adminAddr, err := stack.FreeAddr()
	if err != nil {
		return nil, err
	}
	env := serviceEnv{
		RelayMode:  opts.RelayMode,
		PaymentsDB: paymentsURL, ConsumerDB: consumerURL, Topic: report.Topic, Group: "antifraud-" + report.RunID,
		APIAddr: apiAddr, ConsumerAddr: consumerAddr, AdminAddr: adminAddr, RelayBrokers: relayBrokers, ConsumerBrokers: brokers,
		ProxiedPostgres: opts.Ports.ProxiedPostgres(), ConsumerProxiedPostgres: opts.Ports.ConsumerProxiedPostgres(),
	}
	if sc.Replicas > 1 {
		if env.ReplicaAddr, err = stack.FreeAddr(); err != nil {
			return nil, err
		}
		if env.ReplicaAdminAddr, err = stack.FreeAddr(); err != nil {
			return nil, err
		}
	}
	rn := &Run{Ports: opts.Ports, PaymentsDB: paymentsURL, ConsumerDB: consumerURL, Brokers: brokers, logDir: logDir, Topic: report.Topic, Group: env.Group,
		RelayMode: report.RelayMode, APIKey: apiKey}
	rn.API, rn.Consumer = env.processes(opts.Binaries, opts.Commands, sc, logDir)
	if env.ReplicaAddr != "" {
		rn.Replica = env.replica(rn.API, logDir)
	}
	if sc.Consumers > 1 {
		if sc.Cluster {
			return rn, fmt.Errorf("scenario %s: several consumer instances run on the single broker only (the group tap forwards to one broker)", sc.Name)
		}
		rn.startConsumerTap(report.StartedAt, opts.Logger)
		first := rn.Consumer
		rn.Consumer = nil
		for range sc.Consumers {
			rn.Consumer = first // the template of every instance
			if _, err := rn.newConsumerInstance(); err != nil {
				return rn, err
			}
		}
		rn.Consumer = rn.Consumers[0]
	} else {
		rn.Consumers = []*stack.Process{rn.Consumer}
	}
	for _, p := range rn.processes() {
		if err := p.Start(); err != nil {
			return rn, err
		}
	}
	for _, p := range rn.processes() {
		if err := p.WaitHealthy(ctx); err != nil {
			return rn, err
		}
	}
	opts.Logger.Info("services up", slog.String("api", rn.API.BaseURL), slog.String("consumer", rn.Consumer.BaseURL), slog.String("logs", logDir))
	return rn, nil
}

// targetRun wraps a service that somebody else runs. The harness cannot kill or
// restart it, so the scenarios that do are refused with the way to run them.
func targetRun(opts Options, sc Scenario, report *verdict.Report) (*Run, error) {
	t := opts.Target
	if sc.Cluster {
		return nil, fmt.Errorf("scenario %s not runnable against -api-url: it runs on the three-node cluster, whose brokers the harness kills; give -api-cmd and -consumer-cmd instead", sc.Name)
	}
	if sc.Name != "default" && sc.Name != "kafka-down" {
		return nil, fmt.Errorf("scenario %s not runnable against -api-url: it kills or restarts the services, which the harness can do only if it starts them; give -api-cmd and -consumer-cmd instead (docs/contract.md, \"Letting make chaos start your service\")", sc.Name)
	}
	report.Stack = cmp.Or(t.Stack, "external")
	report.Topic, report.PaymentsDatabase, report.ConsumerDatabase = t.Topic, redact(t.PaymentsDB), redact(t.ConsumerDB)
	return &Run{
		PaymentsDB: t.PaymentsDB, ConsumerDB: t.ConsumerDB, Brokers: t.Brokers, KafkaOpts: t.KafkaOpts, logDir: "(not ours)", APIKey: opts.APIKey,
		API:      &stack.Process{Name: "api", BaseURL: strings.TrimRight(t.APIURL, "/")},
		Consumer: &stack.Process{Name: "consumer"},
	}, nil
}

// TargetRunnable says why the black-box mode (Options.Target) cannot run sc, or nil
// when it can.
func TargetRunnable(opts Options, sc Scenario) error {
	if err := checkRunnable(opts, sc); err != nil {
		return err
	}
	_, err := targetRun(opts, sc, &verdict.Report{})
	return err
}

// checkRunnable refuses, before anything is created, the scenarios that would judge
// a student's commands by a mode only our API has.
func checkRunnable(opts Options, sc Scenario) error {
	if opts.Commands != nil && sc.DualWrite {
		return fmt.Errorf("scenario %s not runnable with -api-cmd: it shows the reference API's teaching mode (DUAL_WRITE=true), not a property of another service", sc.Name)
	}
	if sc.Replicas > 1 && (opts.Commands != nil || opts.Target != nil) {
		return fmt.Errorf("scenario %s not runnable against another service: it runs two processes of our API on one database", sc.Name)
	}
	return nil
}

// redact drops the password from a database URL before it goes into a report.
func redact(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil || dbURL == "" {
		return ""
	}
	return u.Redacted()
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

// FailedPublishAttempts is the run's total of failed publish attempts so far.
func (rn *Run) FailedPublishAttempts() (int, bool) {
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
	n, ok, err := ScrapeCounter(context.Background(), rn.API.MetricsBase()+"/metrics", "outbox_publish_failures_total")
	return n, ok && err == nil
}

// dualWriteFailureLog is the message internal/dualwrite logs when a publish fails.
const dualWriteFailureLog = "dual write: publish failed"

// LeasedRows counts outbox rows claimed by a relay and not yet published: the rows a
// kill leaves behind for the lease to expire; -1 when that cannot be read, as in a
// student's schema without our lease columns. The CDC relay leases nothing: what a
// kill leaves behind is its unconfirmed events, every pending row (PendingRows).
func (rn *Run) LeasedRows(ctx context.Context) int {
	if rn.RelayMode == verdict.RelayModeCDC {
		return rn.PendingRows(ctx)
	}
	return rn.countOutbox(ctx, verify.HeldOutboxRows)
}

// SetTopicConfig sets one config of the run's topic, or removes its override when value
// is empty.
func (rn *Run) SetTopicConfig(ctx context.Context, key, value string) error {
	alter := kadm.AlterConfig{Op: kadm.SetConfig, Name: key, Value: &value}
	if value == "" {
		alter = kadm.AlterConfig{Op: kadm.DeleteConfig, Name: key}
	}
	return kafkasec.WithAdmin(rn.Brokers, rn.KafkaOpts, func(adm *kadm.Client) error {
		resps, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{alter}, rn.Topic)
		if err == nil {
			var resp kadm.AlterConfigsResponse
			if resp, err = resps.On(rn.Topic, nil); err == nil {
				err = resp.Err
			}
		}
		if err != nil {
			return fmt.Errorf("alter %s of topic %s: %w", key, rn.Topic, err)
		}
		return nil
	})
}

// PendingRows counts the pending outbox rows: with the CDC relay, the events on their
// way through the stream (it holds no lock or lease on them); -1 when unreadable.
func (rn *Run) PendingRows(ctx context.Context) int {
	return rn.countOutbox(ctx, func(ctx context.Context, conn *pgx.Conn) (n int, err error) {
		err = conn.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'pending'`).Scan(&n)
		return n, err
	})
}

// countOutbox runs count on a connection of its own to the payments database, within
// 3 s; -1 when that fails.
func (rn *Run) countOutbox(ctx context.Context, count func(context.Context, *pgx.Conn) (int, error)) int {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rn.PaymentsDB)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	n, err := count(ctx, conn)
	if err != nil {
		return -1
	}
	return n
}

// Disrupted records a disruption at the current time.
func (rn *Run) Disrupted(what, detail string) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.disruptions = append(rn.disruptions, verdict.Disruption{What: what, AtSeconds: time.Since(rn.Origin).Seconds(), Detail: detail})
	rn.Logger.Info("disruption", slog.String("what", what), slog.String("detail", detail))
}

// Disruptions returns what was done so far.
func (rn *Run) Disruptions() []verdict.Disruption {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return append([]verdict.Disruption(nil), rn.disruptions...)
}

// Loading reports whether the load is still being sent: an instant worth aiming a kill
// at exists only while requests arrive.
func (rn *Run) Loading() bool {
	select {
	case <-rn.loadDone:
		return false
	default:
		return true
	}
}

// processes lists the run's processes in start order: the consumer, the API and its
// replica if there is one.
func (rn *Run) processes() []*stack.Process {
	ps := append(slices.Clone(rn.Consumers), rn.API)
	if rn.Replica != nil {
		ps = append(ps, rn.Replica)
	}
	return ps
}

// apiURLs are the base URLs of the API processes, where the load spreads its requests.
func (rn *Run) apiURLs() []string {
	urls := []string{rn.API.BaseURL}
	if rn.Replica != nil {
		urls = append(urls, rn.Replica.BaseURL)
	}
	return urls
}

// stopServices stops the API first (it stops taking payments, then its relay), then
// the consumer. Safe to call twice.
func (rn *Run) stopServices(logger *slog.Logger) {
	if rn.Cluster != nil {
		rn.Cluster.Stop()
	}
	for _, p := range append([]*stack.Process{rn.API, rn.Replica}, rn.ConsumerInstances()...) {
		if p == nil {
			continue
		}
		// A frozen instance cannot act on SIGTERM.
		_ = p.Thaw()
		if err := p.Stop(15 * time.Second); err != nil && !errors.Is(err, os.ErrProcessDone) {
			logger.Warn("stop service", slog.String("service", p.Name), slog.Any("err", err))
		}
	}
	if rn.GroupTap != nil {
		rn.GroupTap.Close()
	}
}
