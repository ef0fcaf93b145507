package compose

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// Services starts and stops the services of a compose project.
type Services interface {
	// Up starts the services on fresh databases and a fresh topic and returns once they
	// are started; Run then waits for their /healthz itself.
	Up(ctx context.Context) error
	// Down stops them and removes what Up made.
	Down(ctx context.Context) error
	// APIKey makes a merchant's API key with the API's own command (api keys create) on
	// the started stack's payments database, for every request of the run.
	APIKey(ctx context.Context) (string, error)
}

// Stack is a compose project as the harness checks it: the services the file
// describes, judged from the host in the black-box mode of a Target (the mode of
// -api-url), so only what the file gives them counts, as it would for a student's
// service. How the services start is the one part that varies: docker compose in
// compose mode (DockerCompose), processes given the file's environment in the test
// that keeps the file and the code in step.
type Stack struct {
	Project *types.Project
	// View maps the file's addresses and names to the host's (PublishedAddrs in
	// compose mode).
	View     View
	Services Services
}

// Run runs the named scenarios against the compose stack, each on a stack of
// its own (Up, the run, Down), and returns the reports of those that ran. First it says,
// one line each, which scenarios the black-box mode cannot run and why; those are not
// errors. The error joins the failures of the harness (a stack that would not start, a
// scenario that could not run); a failed SLO is a report with Pass false.
func Run(ctx context.Context, opts harness.Options, cs Stack, names []string, scenarios map[string]harness.Scenario) (map[string]*verdict.Report, error) {
	toxiproxyAPI := cmp.Or(opts.Ports, devstack.DefaultPorts()).ToxiproxyAPI()
	target, consumerURL, err := composeTarget(cs.Project, cs.View, toxiproxyAPI)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", stack.ComposeFile, err)
	}
	opts.Target = target
	// The defaults of a target: its reports go to .stack/chaos-reports, beside the
	// committed reports of the native runs, not over them.
	opts = opts.WithDefaults()
	var runnable []harness.Scenario
	for _, name := range names {
		sc := scenarios[name]
		if why := composeLimit(opts, sc); why != "" {
			fmt.Fprintf(opts.Out, "scenario %s: not run on the compose stack: %s (it runs on the native stack: unset STACK)\n", name, why)
			continue
		}
		runnable = append(runnable, sc)
	}
	if len(runnable) == 0 {
		return nil, errors.New("no scenario asked for runs on the compose stack")
	}
	reports := map[string]*verdict.Report{}
	var errs []error
	for _, sc := range runnable {
		fmt.Fprintf(opts.Out, "\n== %s (compose stack): %s\n", sc.Name, sc.Description)
		report, err := cs.run(ctx, opts, sc, consumerURL)
		if err != nil {
			// A harness failure ends this scenario, not the others.
			fmt.Fprintf(opts.Out, "scenario %s could not run: %v\n", sc.Name, err)
			errs = append(errs, fmt.Errorf("scenario %s: %w", sc.Name, err))
			continue
		}
		reports[sc.Name] = report
	}
	return reports, errors.Join(errs...)
}

// run runs one scenario on a stack started for it alone: the verifier counts every
// payment of the databases and every event of the topic, so a second run on the same
// stack would see the first one's.
func (s Stack) run(ctx context.Context, opts harness.Options, sc harness.Scenario, consumerURL string) (report *verdict.Report, err error) {
	if err := s.Services.Up(ctx); err != nil {
		return nil, err
	}
	defer func() {
		downCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		err = errors.Join(err, s.Services.Down(downCtx))
	}()
	healthCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, p := range []*stack.Process{{Name: composeAPI, BaseURL: opts.Target.APIURL}, {Name: composeConsumer, BaseURL: consumerURL}} {
		if err := p.WaitHealthy(healthCtx); err != nil {
			return nil, err
		}
	}
	if opts.APIKey, err = s.Services.APIKey(ctx); err != nil {
		return nil, err
	}
	return harness.RunScenario(ctx, opts, nil, sc)
}

// composeLimit says why the black-box mode cannot run sc against the compose stack,
// or "" when it can. Which scenarios run is the black-box mode's decision
// (harness.TargetRunnable), the same as for -api-url; the reasons here say it in the terms of the
// compose stack.
func composeLimit(opts harness.Options, sc harness.Scenario) string {
	err := harness.TargetRunnable(opts, sc)
	if err == nil {
		return ""
	}
	if why, ok := composeLimits[sc.Name]; ok {
		return why
	}
	return err.Error()
}

// composeLimits are the reasons of composeLimit, by scenario. Every one comes down to
// the harness not starting the services: it cannot kill or freeze a container's
// process, set a service's environment, or drive the servers of scripts/stack.
var composeLimits = map[string]string{
	"dual-write":         "it runs our API in its teaching mode (DUAL_WRITE=true), which the harness sets only on an API it starts",
	"relay-crash":        "it SIGKILLs and restarts the API, which the harness can do only to a process it started",
	"consumer-crash":     "it freezes (SIGSTOP), SIGKILLs and restarts the consumer, which the harness can do only to a process it started",
	"replica-pause":      "it freezes (SIGSTOP) one of two API processes, which the harness can do only to processes it started",
	"hostile-records":    "the black-box mode (as with -api-url), in which the compose stack is checked, does not run it",
	"clock-skew":         "it sets our relay's fault-injection knob RELAY_FAULT_TIMESTAMP_SKEW, which the harness gives only to an API it starts",
	"poison":             "it gives the API the harness's alert webhook, admin token and dead-letter limit at start (ALERT_WEBHOOK_URL, ADMIN_TOKEN, RELAY_MAX_REJECTIONS), which the harness can do only to an API it starts",
	"dlq-replay":         "it gives two API processes the harness's admin token and dead-letter limit at start (ADMIN_TOKEN, RELAY_MAX_REJECTIONS=1), and with RELAY_MODE=cdc stops and starts them, which the harness can do only to processes it started",
	"commit-refused":     "it points the API's DATABASE_URL at the Toxiproxy proxy postgres_api, which the harness can do only to an API it starts",
	"pg-faults":          "it points the API's DATABASE_URL at the Toxiproxy proxy postgres_api, which the harness can do only to an API it starts",
	"idempotency-storm":  "it SIGKILLs and restarts the API, and points its DATABASE_URL at the Toxiproxy proxy postgres_api, which the harness can do only to an API it starts",
	"consumer-db":        "it points the consumer's DATABASE_URL at the Toxiproxy proxy postgres_consumer, which the harness can do only to a consumer it starts",
	"long-transaction":   "the black-box mode (as with -api-url), in which the compose stack is checked, does not run it",
	"consumer-rebalance": "it starts, stops, kills and freezes several consumer instances, each reaching Kafka through a group tap of its own, which the harness can do only to consumers it starts",
	"broker-failover":    "it runs on the three-node cluster, whose brokers the harness kills and restarts through scripts/stack",
	"partition-offline":  "it runs on the three-node cluster of scripts/stack and gives the API settings at start",
	"rolling-restart":    "it runs on the three-node cluster, whose brokers the harness restarts through scripts/stack",
	"pg-failover":        "it runs the services on a PostgreSQL pair of its own, started, killed and promoted through scripts/stack",
	"pg-failover-async":  "it runs the services on a PostgreSQL pair of its own, started, killed and promoted through scripts/stack",
	"db-restart":         "it restarts the PostgreSQL server through scripts/stack, the native stack's",
}

// DockerCompose starts the services with docker compose.
type DockerCompose struct {
	// File is the compose file's path. Required.
	File string
	// Out receives docker compose's output. Default: discarded.
	Out io.Writer
}

// Up removes any stack left from an earlier run or `make up` (down -v: its data would
// count in the verdict), checks that the host ports it publishes are free, and starts
// the stack, building the project image.
func (d DockerCompose) Up(ctx context.Context) error {
	if err := d.compose(ctx, "down", "-v"); err != nil {
		return err
	}
	p, err := Load(ctx, d.File, nil)
	if err != nil {
		return err
	}
	if err := checkPortsFree(p); err != nil {
		return err
	}
	return d.compose(ctx, "up", "-d", "--build", "--wait")
}

// APIKey runs "api keys create" in a one-off container of the api service, on the
// stack's database, and returns the key it prints.
func (d DockerCompose) APIKey(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", "compose", "-f", d.File, "run", "--rm", "-T", "--no-deps", composeAPI, "keys", "create", "--merchant", "chaos")
	if d.Out != nil {
		cmd.Stderr = d.Out
	}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("docker compose run %s keys create: %w", composeAPI, err)
	}
	return load.ParseAPIKey(out)
}

// Down stops the stack and removes its volumes.
func (d DockerCompose) Down(ctx context.Context) error {
	return d.compose(ctx, "down", "-v")
}

func (d DockerCompose) compose(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "docker", append([]string{"compose", "-f", d.File}, args...)...)
	if d.Out != nil {
		cmd.Stdout, cmd.Stderr = d.Out, d.Out
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker compose %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// checkPortsFree fails when something on the host already listens on a port the stack
// publishes: the compose stack publishes the native stack's ports, so a native stack
// that runs would make `up` fail halfway with a bind error.
func checkPortsFree(p *types.Project) error {
	var taken []string
	for _, s := range p.Services {
		for _, pc := range s.Ports {
			addr := net.JoinHostPort(pc.HostIP, pc.Published)
			l, err := net.Listen("tcp", addr)
			if err != nil {
				taken = append(taken, fmt.Sprintf("%s (service %s)", addr, s.Name))
				continue
			}
			l.Close()
		}
	}
	if len(taken) > 0 {
		return fmt.Errorf("host ports the compose stack publishes are taken: %s; stop what holds them (the native stack: make stack-down)", strings.Join(taken, ", "))
	}
	return nil
}
