package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/migrations"
)

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

// startServices creates the run's fresh databases and topic and starts the consumer
// and the API built from this repository. Nothing left over from an earlier run can
// pass for this run's events.
func startServices(ctx context.Context, opts Options, sc Scenario, report *Report) (*Run, error) {
	paymentsURL, err := devstack.CreateDatabase(ctx, opts.AdminURL, report.PaymentsDatabase)
	if err != nil {
		return nil, err
	}
	if err := devstack.MigrateDatabase(ctx, paymentsURL, migrations.Payments); err != nil {
		return nil, err
	}
	consumerURL, err := devstack.CreateDatabase(ctx, opts.AdminURL, report.ConsumerDatabase)
	if err != nil {
		return nil, err
	}
	if err := devstack.MigrateDatabase(ctx, consumerURL, migrations.Antifraud); err != nil {
		return nil, err
	}
	brokers := []string{devstack.DirectBroker}
	err = withAdmin(brokers, func(adm *kadm.Client) error { return devstack.CreateTopic(ctx, adm, report.Topic, 3) })
	if err != nil {
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
				"KAFKA_BROKERS=" + devstack.ProxiedBroker, // the relay stays behind Toxiproxy
				"KAFKA_TOPIC=" + report.Topic,
				"HTTP_ADDR=" + apiAddr,
				fmt.Sprintf("DUAL_WRITE=%t", sc.DualWrite),
			}, append(relayEnv, sc.APIEnv...)...),
		},
		Consumer: &Process{
			Name: "consumer", Path: opts.Binaries["./cmd/consumer"], LogPath: filepath.Join(logDir, "consumer.log"), BaseURL: "http://" + consumerAddr,
			Env: append([]string{
				"DATABASE_URL=" + consumerURL,
				"KAFKA_BROKERS=" + devstack.DirectBroker,
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
	opts.Logger.Info("services up", slog.String("api", rn.API.BaseURL), slog.String("consumer", rn.Consumer.BaseURL), slog.String("logs", logDir))
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
	rn.logger.Info("disruption", slog.String("what", what), slog.String("detail", detail))
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
			logger.Warn("stop service", slog.String("service", p.Name), slog.Any("err", err))
		}
	}
}
