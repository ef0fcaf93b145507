package chaos

import (
	"slices"

	"github.com/dscourse/payments-outbox/internal/chaos/harness"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/clockskew"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/cluster"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/crash"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/dlqreplay"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/hostile"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/longtx"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/network"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/pgfailover"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/pgfault"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/poison"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/rebalance"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/replicapause"
	"github.com/dscourse/payments-outbox/internal/chaos/scenario/storm"
)

// registry is every scenario, in the order `-scenario all` runs them: the outbox run
// first and the dual-write run right after it, for the side-by-side table; the cluster
// scenarios together, on the three-node cluster; pg-failover on a PostgreSQL pair of
// its own; db-restart last, because it restarts the shared PostgreSQL server. A new scenario is one line here.
func registry(short bool) []harness.Scenario {
	return []harness.Scenario{
		network.Default(short),
		network.DualWrite(short),
		network.KafkaDown(short),
		crash.Relay(short),
		crash.Consumer(short),
		rebalance.Scenario(short),
		replicapause.Scenario(short),
		hostile.Scenario(short),
		clockskew.Scenario(short),
		poison.Scenario(short),
		dlqreplay.Scenario(short),
		pgfault.PGFaults(short),
		pgfault.CommitRefused(short),
		storm.Scenario(short),
		pgfault.ConsumerDB(short),
		longtx.Scenario(short, 0),
		cluster.BrokerFailover(short),
		cluster.PartitionOffline(short),
		cluster.RollingRestart(short),
		pgfailover.Scenario(short),
		pgfailover.AsyncScenario(short),
		pgfault.DBRestart(short),
	}
}

// Scenarios returns every scenario by name. short shrinks the windows for the CI test.
// Each call makes new values: a scenario's faults keep what they saw during a run, so a
// caller takes a fresh one for every run (one per relay mode, one per mutant).
func Scenarios(short bool) map[string]harness.Scenario {
	byName := map[string]harness.Scenario{}
	for _, sc := range registry(short) {
		byName[sc.Name] = sc
	}
	return byName
}

// ScenarioNames lists the scenarios in the order `-scenario all` runs them (registry).
func ScenarioNames() []string {
	var names []string
	for _, sc := range registry(false) {
		names = append(names, sc.Name)
	}
	return names
}

// IsScenario reports whether name is a scenario or "all".
func IsScenario(name string) bool {
	return name == "all" || slices.Contains(ScenarioNames(), name)
}
