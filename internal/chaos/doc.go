// Package chaos is the harness behind `make chaos`: it starts the services of this
// repository (or a student's) on the native stack, sends payments while it breaks the
// network between the relay and Kafka, kills processes or breaks the databases, and
// then checks, as numbers, that no committed payment lost its event or its decision.
//
// This package only lists the scenarios (registry.go): Scenarios and ScenarioNames, for
// cmd/chaos, cmd/mutants and internal/mutants. The rest is split by stage, each package
// usable on its own:
//
//   - harness runs one scenario from start to verdict (harness.RunScenario): fresh
//     databases and topic, the services, the warm-up, the load under the disruption,
//     the drain, the evidence and the rows every scenario shares. Start there, with
//     harness.Scenario;
//   - stack starts the native stack, builds the binaries and runs each service as a
//     process the scenarios start, kill and restart;
//   - load is the load generator (the Go twin of loadtest/k6/payments.js);
//   - faults drives Toxiproxy on a deterministic schedule, injects copies of real
//     records into the topic, and watches the three-node cluster;
//   - verify is the black-box verifier: it reads only the payments database, the topic
//     and, optionally, the consumer's database, so it can check any implementation
//     that keeps docs/contract.md;
//   - verdict is the report: it decides the verdict, prints it and writes JSON;
//     timeline draws the HTML page of a run; deadletter is the pager that receives the
//     relay's alerts; compose runs the scenarios against deploy/docker-compose.yml.
//
// The scenarios live under scenario/, one package per family, each with a scenarios.go
// that makes its harness.Scenario values: network (default, dual-write, kafka-down),
// crash (relay-crash, consumer-crash), replicapause, hostile (hostile-records),
// clockskew, poison, dlqreplay (dlq-replay), pgfault (pg-faults, commit-refused,
// consumer-db, db-restart), pgfailover (pg-failover), storm (idempotency-storm), longtx
// (long-transaction) and cluster (broker-failover, partition-offline, rolling-restart).
//
// To add a scenario: write a function that returns a harness.Scenario (its Disrupt, and
// the Validity rows proving the disruption bit), in a new package under scenario/ or
// in the family it belongs to, and add one line for it to registry. A scenario package
// depends on harness and the stage packages, never the other way round.
//
// A run is valid only if its faults demonstrably bit, by evidence the harness gathers
// itself and never from the service's metrics (events held back by a window, the
// proxy refusing the harness's own probe, copies injected, PostgreSQL's own start time
// and timelines, kills); an invalid run is reported as such, never as a pass. A run whose service
// failed an SLO or the contract is FAIL, whatever validity says.
package chaos
