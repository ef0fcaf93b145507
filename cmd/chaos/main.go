// Command chaos is `make chaos`: it proves, as numbers, that the transactional outbox
// loses no event while Kafka fails, and shows the dual write losing them.
//
//	go run ./cmd/chaos -scenario default|kafka-down|relay-crash|consumer-crash|consumer-rebalance|db-restart|pg-failover|pg-failover-async|dual-write|all
//
// On the native stack it starts PostgreSQL, Kafka and Toxiproxy (scripts/stack), builds
// cmd/api and cmd/consumer into bin/, runs each scenario on fresh databases and a fresh
// topic, prints a verdict table, writes reports/chaos-<scenario>.json, and exits 0 only
// if every run was valid (its faults bit) and passed. The native stack is the default,
// whether Docker runs or not; with STACK=compose the services of
// deploy/docker-compose.yml run in Docker instead, one fresh stack per scenario, and the
// harness checks them from the host in the black-box mode of -api-url below: the same
// verdict and reports (under .stack/chaos-reports), for the scenarios that mode runs.
//
// A student's implementation that keeps docs/contract.md is checked in one of two ways:
//
//   - -api-cmd and -consumer-cmd give the command lines that start it: the harness
//     creates empty databases and a fresh topic, passes them in the contract's
//     environment, and owns the processes, so it can SIGKILL and restart them and every
//     scenario but dual-write runs;
//   - -api-url, -payments-db, -brokers, -topic and optionally -consumer-db point at a
//     service the student started, with its relay seeded at 127.0.0.1:29092 (the
//     Toxiproxy proxy kafka_relay): nothing is built or started, and only default and
//     kafka-down run; the crash scenarios are reported as not runnable.
//
// Next to each JSON report it writes reports/chaos-<scenario>.html, the run's verdict
// above its timeline, and for -scenario all reports/index.html, the scenarios side by
// side (package timeline). html rebuilds those pages from the JSON reports:
//
//	go run ./cmd/chaos html [-dir reports]
//
// For a run of the second kind, prepare makes the empty databases and the fresh topic
// and prints their names:
//
//	go run ./cmd/chaos prepare [-drop NAME]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos"
	"github.com/dscourse/payments-outbox/internal/chaos/compose"
	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/longtx"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/rebalance"
	"github.com/dscourse/payments-outbox/internal/chaos/stack"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/devstack"
	"github.com/dscourse/payments-outbox/internal/event"
	"github.com/dscourse/payments-outbox/internal/repo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

// errFailed is returned when a run was invalid or failed an SLO: the table says which.
var errFailed = errors.New("at least one scenario did not pass (see the verdict tables)")

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "prepare" {
		return prepare(ctx, args[1:], getenv, stdout)
	}
	if len(args) > 0 && args[0] == "html" {
		return rebuildPages(args[1:], stdout)
	}
	flags := flag.NewFlagSet("chaos", flag.ContinueOnError)
	scenario := flags.String("scenario", "default", "scenario to run: "+strings.Join(chaos.ScenarioNames(), "|")+"|all")
	payments := flags.Int("payments", 100, "payments to send")
	short := flags.Bool("short", false, "shorter fault windows (what the CI test uses)")
	longTxHold := flags.Duration("long-tx-hold", 0, fmt.Sprintf("long-transaction: how long the snapshot is held (default %s, 20s with -short); its load is its own, -payments does not change it", longtx.DefaultHold))
	rebalanceProtocol := flags.String("rebalance-protocol", "", "consumer-rebalance: start every consumer instance with KAFKA_REBALANCE_PROTOCOL set to this ("+strings.Join(rebalance.Protocols(), "|")+") and check that the group ran it; default: the consumer's own")
	apiURL := flags.String("api-url", "", "check an already running implementation at this URL instead of building and starting ours")
	paymentsDB := flags.String("payments-db", "", "with -api-url: URL of its payments database")
	consumerDB := flags.String("consumer-db", "", "with -api-url: URL of its consumer's database (optional)")
	ports, err := devstack.LoadPorts(getenv)
	if err != nil {
		return err
	}
	brokers := flags.String("brokers", ports.DirectBroker(), "with -api-url: Kafka brokers to read the topic from (direct, never the proxy)")
	topic := flags.String("topic", event.DefaultTopic, "with -api-url: the topic of payment events")
	apiCmd := flags.String("api-cmd", "", "start a student's API with this shell command line (with -consumer-cmd; environment in docs/contract.md)")
	consumerCmd := flags.String("consumer-cmd", "", "start a student's consumer with this shell command line (with -api-cmd)")
	apiKey := flags.String("api-key", "", "send \"Authorization: Bearer <key>\" with every request to a student's API (-api-url or -api-cmd); our API gets a key the harness makes")
	kafka := addKafkaFlags(flags)
	relayMode := flags.String("relay-mode", verdict.RelayModePoll, "RELAY_MODE of our API: poll (the polling relay), cdc (logical replication), or both (each scenario in each mode, verdicts side by side)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	var set []string
	flags.Visit(func(f *flag.Flag) { set = append(set, f.Name) })
	commands, err := serviceCommands(*apiCmd, *consumerCmd, set)
	if err != nil {
		return err
	}
	modes := []string{*relayMode}
	if *relayMode == "both" {
		modes = []string{verdict.RelayModePoll, verdict.RelayModeCDC}
	} else if !verdict.ValidRelayMode(*relayMode) {
		return fmt.Errorf("-relay-mode %q: want %s, %s or both", *relayMode, verdict.RelayModePoll, verdict.RelayModeCDC)
	}
	if *rebalanceProtocol != "" && !slices.Contains(rebalance.Protocols(), *rebalanceProtocol) {
		return fmt.Errorf("-rebalance-protocol %q: want one of %s", *rebalanceProtocol, strings.Join(rebalance.Protocols(), ", "))
	}
	if !chaos.IsScenario(*scenario) {
		return fmt.Errorf("unknown scenario %q: want one of %s or all", *scenario, strings.Join(chaos.ScenarioNames(), ", "))
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	kafkaOpts, err := kafka.targetOpts(ctx, getenv, *apiURL != "", strings.Split(*brokers, ","), logger)
	if err != nil {
		return err
	}

	root, err := repo.Root()
	if err != nil {
		return err
	}
	stackKind, reason, err := stack.Choose(getenv)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "stack: %s (%s)\n", stackKind, reason)
	names := []string{*scenario}
	if *scenario == "all" {
		names = chaos.ScenarioNames()
	}
	// A scenario keeps what its run saw, so every run takes fresh ones.
	freshScenarios := func() map[string]harness.Scenario {
		scenarios := chaos.Scenarios(*short)
		if *longTxHold > 0 {
			scenarios["long-transaction"] = longtx.Scenario(*short, *longTxHold)
		}
		if *rebalanceProtocol != "" {
			scenarios["consumer-rebalance"] = rebalance.WithProtocol(*short, *rebalanceProtocol)
		}
		return scenarios
	}
	if stackKind == stack.ComposeKind {
		opts := harness.Options{Root: root, Payments: *payments, Logger: logger, Out: stdout, ReportDir: filepath.Join(root, ".stack", "chaos-reports")}
		return runCompose(ctx, opts, names, freshScenarios(), set)
	}

	// One chaos run at a time on the machine: the native stack, whichever checkout
	// started it, has one proxy kafka_relay.
	unlock, err := stack.LockRuns(ctx, stack.RunLockPath(), 10*time.Minute)
	if err != nil {
		return err
	}
	defer unlock()

	native := &stack.Native{Root: root, Logger: logger}
	if err := native.Start(ctx); err != nil {
		return err
	}
	// Servers this command started are stopped at the end; servers that were already
	// running are shared with other work and left alone.
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := native.StopStarted(stopCtx); err != nil {
			logger.Warn("stop the native stack", slog.Any("err", err))
		}
	}()

	opts := harness.Options{Root: root, Ports: ports, Payments: *payments, Logger: logger, Out: stdout, Commands: commands, RelayMode: *relayMode, APIKey: *apiKey}
	switch {
	case commands != nil:
		fmt.Fprintf(stdout, "starting the student's services: api %q, consumer %q\n", commands.API, commands.Consumer)
	case *apiURL != "":
		opts.Target = &harness.Target{APIURL: *apiURL, PaymentsDB: *paymentsDB, ConsumerDB: *consumerDB, Brokers: strings.Split(*brokers, ","), KafkaOpts: kafkaOpts, Topic: *topic}
	default:
		fmt.Fprintln(stdout, "building ./cmd/api and ./cmd/consumer into bin/")
		if opts.Binaries, err = stack.Build(ctx, root, filepath.Join(root, "bin"), "./cmd/api", "./cmd/consumer"); err != nil {
			return err
		}
	}

	if opts.Binaries == nil {
		modes = modes[:1] // a student's service has its own relay: RELAY_MODE is ours
	}
	byMode := map[string]map[string]*verdict.Report{}
	passed := true
	for _, mode := range modes {
		opts.RelayMode = mode
		reports := map[string]*verdict.Report{}
		byMode[mode] = reports
		for _, name := range names {
			sc := freshScenarios()[name]
			fmt.Fprintf(stdout, "\n== %s (relay %s): %s\n", name, mode, sc.Description)
			if sc.Cluster {
				// Started on first need (tens of seconds: three JVMs start at once) and
				// stopped at the end if this command started it.
				started := time.Now()
				if err := native.StartCluster(ctx); err != nil {
					fmt.Fprintf(stdout, "scenario %s could not run: three-node cluster: %v\n", name, err)
					passed = false
					continue
				}
				fmt.Fprintf(stdout, "three-node Kafka cluster ready after %s\n", time.Since(started).Round(100*time.Millisecond))
			}
			report, err := harness.RunScenario(ctx, opts, native, sc)
			if err != nil {
				// A harness failure ends this scenario, not the others.
				fmt.Fprintf(stdout, "scenario %s could not run: %v\n", name, err)
				passed = false
				continue
			}
			reports[name] = report
			passed = passed && report.Pass
			if err := writePage(opts.ReportDirectory(), report, stdout); err != nil {
				return err
			}
		}
		if reports["default"] != nil && reports["dual-write"] != nil {
			verdict.PrintComparison(stdout, reports["default"], reports["dual-write"])
		}
	}
	if len(modes) > 1 {
		harness.PrintRelayModes(stdout, names, byMode)
	}
	if *scenario == "all" {
		// The index shows the polling relay's runs (the default) when both modes ran.
		if err := writeIndex(opts.ReportDirectory(), names, byMode[modes[0]], stdout); err != nil {
			return err
		}
	}
	if !passed {
		return errFailed
	}
	return nil
}

// serviceCommands reads -api-cmd and -consumer-cmd: nil when neither is given, an
// error when only one is, or when a flag that describes a service somebody else
// started is set too (set lists the flags given).
func serviceCommands(apiCmd, consumerCmd string, set []string) (*harness.ServiceCommands, error) {
	if apiCmd == "" && consumerCmd == "" {
		return nil, nil
	}
	for _, name := range set {
		if slices.Contains([]string{"api-url", "payments-db", "consumer-db", "brokers", "topic"}, name) {
			return nil, fmt.Errorf("-%s cannot go with -api-cmd: the harness starts the service on databases, a topic and an address of its own, and passes them in its environment", name)
		}
	}
	cmds := &harness.ServiceCommands{API: apiCmd, Consumer: consumerCmd}
	if err := cmds.Validate(); err != nil {
		return nil, err
	}
	return cmds, nil
}

// composeFlags are the flags that describe services somebody else runs, or our API's
// relay mode: in compose mode the services and their settings are the compose file's.
var composeFlags = []string{"api-url", "payments-db", "consumer-db", "brokers", "topic", "api-cmd", "consumer-cmd", "relay-mode"}

// runCompose is make chaos STACK=compose: the services of deploy/docker-compose.yml in
// Docker, one fresh stack per scenario, checked from the host through its published
// ports in the black-box mode of -api-url (compose.Run), with the verdict table,
// the reports and their pages as on the native stack. set lists the flags given.
func runCompose(ctx context.Context, opts harness.Options, names []string, scenarios map[string]harness.Scenario, set []string) error {
	for _, name := range set {
		if slices.Contains(composeFlags, name) {
			return fmt.Errorf("-%s cannot go with STACK=compose: the compose stack runs our services with the settings of %s", name, stack.ComposeFile)
		}
	}
	file := filepath.Join(opts.Root, stack.ComposeFile)
	// The environment docker compose interpolates the file with, so that the harness
	// reads the file as the services get it.
	project, err := compose.Load(ctx, file, os.Environ())
	if err != nil {
		return err
	}
	cs := compose.Stack{
		Project:  project,
		View:     compose.View{Addr: compose.PublishedAddrs(project)},
		Services: compose.DockerCompose{File: file, Out: os.Stderr},
	}
	reports, err := compose.Run(ctx, opts, cs, names, scenarios)
	passed := err == nil
	for _, name := range names {
		report := reports[name]
		if report == nil {
			continue
		}
		passed = passed && report.Pass
		if err := writePage(opts.ReportDir, report, opts.Out); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	if !passed {
		return errFailed
	}
	return nil
}
