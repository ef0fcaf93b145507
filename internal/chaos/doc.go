// Package chaos is the harness behind `make chaos`: it starts the services of this
// repository on the native stack, sends payments while Toxiproxy breaks the network
// between the relay and Kafka (or while processes and the database are killed), and
// then checks, as numbers, that no committed payment lost its event or its decision.
//
// The pieces are split by concern and usable on their own:
//
//   - package stack starts the native stack and builds the binaries, and runs each
//     service as a real process that the scenarios start, kill and restart; run.go
//     creates fresh databases and a topic, and services.go gives the API and the
//     consumer their settings, or a student's services from their command lines;
//   - crashes.go, apiwatch.go and consumerwatch.go are the crash scenarios' kills, at
//     random points, aimed (by freezing a process and reading its databases) at the
//     instants between two of its commits, and what each kill left behind, seen from
//     outside;
//   - hostile.go, hostilerun.go and hostilecheck.go are another producer's malformed
//     records and their check; clockskew.go makes the broker refuse the relay's
//     timestamps for a while; poison.go lowers the topic's size limit below the largest
//     valid events and replays their dead letters (package deadletter holds the pager,
//     AlertSink, and the read-back of each record's size on the wire, RecordSizes);
//     pgfaults.go slows, cuts and stops the API's link to PostgreSQL through a Toxiproxy
//     proxy of its own, and consumerdb.go the consumer's link to its own database through
//     another (consumerdlq.go judges the consumer's dead letters in every scenario);
//     retention.go shortens the API's retention through kafka-down's outage; longtx.go
//     holds a snapshot open and measures the relay around it;
//   - package load is the load generator (the Go twin of loadtest/k6/payments.js):
//     it takes payments on through their lifecycle (capture, refunds, cancel, and races
//     of two transitions); loadrows.go holds the SLO rows of what its clients saw;
//   - package faults drives Toxiproxy on a deterministic schedule and records the
//     windows, injects copies of real records into the topic, and watches the
//     three-node cluster;
//   - package verify is the black-box verifier: it needs only the payments database,
//     the Kafka topic and, optionally, the consumer's database, so it can check any
//     implementation that keeps docs/contract.md; observed.go and totals.go turn what
//     it read into counts, and order.go checks each payment's events against their
//     sequence, in the topic and in the consumer;
//   - storm.go and stormcheck.go are the idempotency storm: every Idempotency-Key
//     sent by several clients at once (load.Storm), with short client timeouts and
//     retries, while the API is SIGKILLed; what each key made is read from the payments
//     table and the topic;
//   - replicapause.go runs two API replicas on one outbox and pauses one past its lease,
//     and replicapausehold.go watches for claims that outlive it;
//   - evidence.go turns what the harness saw for itself into the validity rows;
//   - sampler.go samples the run every few hundred milliseconds from the same outside
//     sources, into the timeline (verdict.Timeline) that the JSON report keeps and the
//     HTML report of package timeline draws; the verdict never reads it;
//   - cluster.go, failover.go, partitionoffline.go and rollingrestart.go are the
//     scenarios on the three-node cluster: brokers killed, stopped and started through
//     scripts/stack/kafka.sh, one broker cut off from the relay by its own proxy, and
//     the cluster followed from outside by faults.ClusterWatch (leaders, in-sync
//     replicas, the group's coordinator and commits);
//   - scenarios.go says what each scenario breaks and when a run counts as valid;
//   - runner.go puts them together, checks.go holds the SLO and contract rows, and
//     package verdict holds the report: it decides the verdict, prints it and writes
//     JSON;
//   - package compose runs the same scenarios against the services of
//     deploy/docker-compose.yml (STACK=compose), judged from the host as a service the
//     harness did not start.
//
// A run is valid only if its faults demonstrably bit, by evidence the harness gathers
// itself and never from the service's metrics (events held back by a window, the
// proxy refusing the harness's own probe, copies injected, PostgreSQL's own start time,
// kills); an invalid run is reported as such, never as a pass. A run whose service
// failed an SLO or the contract is FAIL, whatever validity says.
package chaos
