package harness

import (
	"context"
	"log/slog"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
	"github.com/dscourse/payments-outbox/internal/devstack"
)

// A Scenario says what a chaos run breaks, when, and how to tell that it did.
type Scenario struct {
	Name        string
	Description string
	// DualWrite runs the API in the teaching dual-write mode (DUAL_WRITE=true).
	DualWrite bool
	// LosesAcknowledged marks a run that exists to show payments lost below the
	// service: answered 201 by a database that then lost them (pg-failover-async, whose
	// promoted standby never received them). Those payments break the course's SLO rows
	// by definition, so the run is judged by lessonChecks instead: the loss must show,
	// and nothing the surviving database holds may be lost or out of order.
	LosesAcknowledged bool
	// Cluster runs the scenario on the three-node cluster (package scenario/cluster)
	// instead of the single broker: its topic has three replicas and
	// min.insync.replicas=2.
	Cluster bool
	// Replicas runs this many API processes on one database, each with its relay, and
	// spreads the load over them; 0 or 1 is one. Only our API (the harness starts them).
	Replicas int
	// Consumers runs this many consumer instances in one group, on one database: the
	// same command started N times (docs/contract.md), each through its own listener
	// of the group tap (groupwatch.Tap), which adds the SLO row on commits by a
	// non-owner. 0 or 1 is one, connected straight to the broker.
	Consumers int
	// Span paces the load over this long; 0 sends everything at once.
	Span time.Duration
	// Bursts, with a Span, sends the load in this many bursts of parallel requests.
	Bursts int
	// Payments, when set, replaces Options.Payments: a scenario whose load must keep a
	// steady rate for a given time (long-transaction) sends that many.
	Payments int
	// LargestEvery makes every LargestEvery-th payment the largest valid one
	// (load.Config.LargestEvery); 0 makes none.
	LargestEvery int
	// MaxAttempts, when set, replaces the load's attempts per payment
	// (load.Config.MaxAttempts, 10: about 24 s of backoff), for a fault that outlasts them.
	MaxAttempts int
	// LoadDelay is how long after the disruption starts the load is sent, so that the
	// load meets a fault already in force.
	LoadDelay time.Duration
	// CopyEvery makes the harness publish one extra copy of every CopyEvery-th event
	// straight to the topic (see TopicWatch), so that the consumer's dedup is tested
	// whatever the relay does; 0 injects none.
	CopyEvery int
	// APIEnv is added to our API's environment, ConsumerEnv to every consumer's (the
	// tuning the contract lists as optional), and ReferenceConsumerEnv to our
	// consumer's only: knobs a student's consumer does not have.
	APIEnv               []string
	ConsumerEnv          []string
	ReferenceConsumerEnv []string
	// APITuning is added to every API's environment, ours and a student's: optional
	// tuning the contract lists, such as a short retention of published rows.
	APITuning []string
	// APIThroughPostgresProxy sends our API's (and its relay's) database connections
	// through the Toxiproxy proxy devstack.PostgresProxy, for Disrupt to break.
	APIThroughPostgresProxy bool
	// ConsumerThroughPostgresProxy sends the consumer's database connections, and only
	// those, through the Toxiproxy proxy devstack.ConsumerPostgresProxy.
	ConsumerThroughPostgresProxy bool
	// Postgres, when set, starts PostgreSQL servers of the scenario's own, on which the
	// run's databases are made in place of the native stack's server: for a scenario
	// that kills and promotes servers, which the server every checkout of the machine
	// shares must never undergo. It returns their admin URL, which the services, the
	// verifier and the clean-up then use (a multi-host URL reaches whichever server is
	// the primary), and stop, which the runner calls once the services have stopped;
	// passed says whether the run passed, so that a failed run's servers can be kept.
	Postgres func(ctx context.Context, root string, logger *slog.Logger) (adminURL string, stop func(passed bool), err error)
	// Prepare, when set, runs before the services start and returns environment to add
	// to our API's: for what only exists once the run does (a webhook's port, a token).
	// It gets the ports of the native stack the run uses.
	Prepare func(ports devstack.Ports) (apiEnv []string, err error)
	// BeforeLoad, when set, runs after the warm-up and before the disruption starts:
	// for a measurement the disruption depends on. It returns how many payments it
	// committed, which the run counts with the warm-up's.
	BeforeLoad func(ctx context.Context, rn *Run, verifier *verify.Verifier, report *verdict.Report) (payments int, err error)
	// AfterLoad, when set, runs once the load has been sent and before the runner waits
	// for the drain: for a step the drain depends on, such as replaying dead letters.
	AfterLoad func(ctx context.Context, rn *Run) error
	// Disrupt breaks things. It starts before the load and runs until ctx ends, which
	// is after the verifier has seen the drain and the decisions; it must leave the
	// services running when it returns (the runner checks).
	Disrupt func(ctx context.Context, rn *Run) error
	// FinishDisruption makes the runner wait, once the load has been sent, until
	// Disrupt returns by itself before it waits for the drain: for a disruption that
	// does a set number of things (kills) and must not be cut short by a service that
	// drains fast. Disrupt must then return after its last step.
	FinishDisruption bool
	// Load, when set, replaces the load generator (load.Run) with the scenario's own, for
	// a load that is itself the fault: the idempotency storm's keys sent by several
	// clients at once. It gets the load.Config load.Run would have got.
	Load func(ctx context.Context, rn *Run, cfg load.Config) (load.Result, error)
	// Validity lists the checks proving the disruption happened, and any SLO rows of
	// the scenario's own (every row is judged by its kind).
	Validity func(r *verdict.Report, rn *Run) []verdict.Check
	// Foreign, when set, are the records Disrupt writes to the topic itself, as another
	// producer would: the verifier and the topic watch leave them out (see
	// ReadTopicExcept, faults.WatchConfig).
	Foreign *verify.ForeignRecords
}

// relayEnv makes the relay's timeouts short enough for the fault windows to outlast
// them, since a window shorter than the producer's timeouts only delays bytes and
// produces no failure:
// a publish attempt gives up after 3 s, a paused relay's lease (a crashed one's, for a
// relay that leases rows in columns) expires after 10 s, and
// the relay-wide backoff after an outage never exceeds 2 s.
var relayEnv = []string{
	"RELAY_PUBLISH_TIMEOUT=3s",
	"RELAY_LEASE=" + RelayLease.String(),
	"RELAY_OUTAGE_BACKOFF_MAX=2s",
}

// RelayLease is the RELAY_LEASE the harness gives every API (relayEnv).
const RelayLease = 10 * time.Second

// DefaultCopyEvery is the Scenario.CopyEvery of most scenarios: one event in five gets
// an extra copy from the harness, about 20 copies in a run of 100 payments, 5 in the
// short run of 20.
const DefaultCopyEvery = 5
