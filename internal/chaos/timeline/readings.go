package timeline

import (
	"fmt"
	"maps"

	"github.com/dscourse/payments-outbox/internal/chaos/verdict"
)

// readings tell a student what to look for in each chart, by chart id, in words that
// hold whatever the run broke.
var readings = map[string]string{
	chartPayments:   "The load as the API committed it: the API answers 201 only after it committed the payment and, with the outbox, its event row in the same transaction.",
	chartPending:    "Outbox rows waiting for the relay: the backlog grows while the relay cannot publish and drains once it can; the events wait in PostgreSQL, none is lost.",
	chartPublishes:  "The relay's publish attempts, from its own counters: a failed attempt is tried again, so the successes catch up after the failures.",
	chartTopic:      "Records written to the topic: each event once, and the copies (a relay's retries, the harness's own).",
	chartDecisions:  "Every payment gets exactly one decision: the consumer follows the topic, whatever happened before it.",
	chartUndecided:  "Payments committed that the consumer has not decided yet: it rises while events wait and comes back to zero once everything is published and decided.",
	chartDuplicates: "Copies of events already decided (from the relay's retries and the harness's own) are recognised by their X-Event-Id and change nothing.",
	chartLost:       "The dual write never tries again: each failed publish is an event lost as it happens, unless the broker wrote it before the fault dropped its answer (acks lost). The verdict counts the real losses at the end, from the topic; \"not decided yet\" above shows them too.",
}

// kafkaReadings are for the scenarios that break the relay's connection to Kafka for
// windows of time (shaded): the payments' commits do not depend on it.
var kafkaReadings = map[string]string{
	chartPayments:  readings[chartPayments] + " The faults are between the relay and Kafka, after the commit, so they do not stop it.",
	chartPublishes: "Failures happen inside the shaded windows; each failed event is tried again, and the successes catch up after the window.",
	chartUndecided: "Rises while Kafka fails. With the outbox it comes back to zero once the relay drains; with the dual write it stays up by the events it lost.",
}

// clusterReadings are for the scenarios that stop brokers of the three-node cluster.
var clusterReadings = map[string]string{
	chartPayments:  readings[chartPayments] + " The brokers stop after the commit, so the API never has to refuse a payment.",
	chartPublishes: "Failures come around a broker's stop (dashed lines), while the relay learns the new leaders; each is tried again.",
	chartTopic:     "The dashed lines are brokers stopped and back: the relay follows the new leaders, so the rate dips and recovers.",
	chartUndecided: "Rises while the relay and the consumer follow the new leaders and group coordinator, and comes back to zero.",
}

// scenarioReadings replace, per scenario, the readings of the charts where its faults
// show. Every scenario has an entry, so that no page describes faults its run did not
// apply: a database fault is not a Kafka fault.
var scenarioReadings = map[string]map[string]string{
	"default": with(kafkaReadings, map[string]string{
		chartTopic: "Requests dropped or proxy down: nothing arrives until the window ends, then the backlog arrives at once. Acks lost: records arrive although the relay sees failures, so some come twice.",
	}),
	"dual-write": with(kafkaReadings, map[string]string{
		chartPending:   "The dual write keeps no outbox: nothing waits here, so what it fails to publish is gone.",
		chartPublishes: "The handler's failed publishes, from its log (nothing counts its successes): each is logged when its publish gives up, inside a window or just after it, and is never tried again.",
		chartTopic:     "Requests dropped or proxy down: the events of the window never arrive. Acks lost: records arrive although the handler saw a failure.",
	}),
	"kafka-down": with(kafkaReadings, map[string]string{
		chartTopic: "Nothing arrives while the proxy is down; the backlog arrives at once when it is back.",
	}),
	"relay-crash": with(kafkaReadings, map[string]string{
		chartPublishes:  "Failures happen inside the lost-acks windows; after each kill (dashed lines) the restarted relay publishes again the rows its dead predecessor had sent and not marked.",
		chartDuplicates: "The rows published again after a kill reach the consumer twice: it recognises them by their X-Event-Id and changes nothing.",
	}),
	"partition-offline": with(kafkaReadings, map[string]string{
		chartTopic: "Only the events of the partition whose leader the relay cannot reach wait; the other partitions keep arriving at close to their rate.",
	}),
	"replica-pause": with(kafkaReadings, map[string]string{
		chartPublishes: "Acks are slowed for the whole run (shaded), so each publish waits for its answer; while one replica is paused (dashed lines) the other takes its rows over.",
		chartUndecided: "Rises while a replica is paused with rows in hand, until the other takes them over, and comes back to zero.",
	}),
	"consumer-crash": {
		chartDecisions:  "Each dashed line is a death of the consumer: decisions stop until it is back with its partitions, then catch up.",
		chartUndecided:  "Rises while the consumer is down; the relay and Kafka are not faulted.",
		chartDuplicates: "Records decided but whose offsets were not yet committed are delivered again after a death: absorbed here.",
	},
	"consumer-rebalance": {
		chartDecisions:  "Each dashed line is a change of the group: decisions pause while its partitions move to another instance, then catch up.",
		chartUndecided:  "Rises while a killed or frozen instance still holds partitions (until its session times out); the relay and Kafka are not faulted.",
		chartDuplicates: "Records processed but not yet committed when their partition moved are delivered again to the new owner: absorbed here.",
	},
	"hostile-records": {
		chartTopic:      "Between the dashed lines the harness writes its own hostile records to the topic: they count here, and the consumer dead-letters them, never decides them.",
		chartDecisions:  "The hostile records change nothing here: the real payments are decided once each, and the consumer never stops.",
		chartDuplicates: "Every third hostile record is a copy of a decided event with another payload: absorbed here, the first one processed wins.",
	},
	"clock-skew": {
		chartPending:   "The backlog grows while the topic refuses the relay's records (between the dashed lines), and drains once it takes them again.",
		chartPublishes: "Between the dashed lines the topic refuses every record of the relay (its timestamps are too far ahead): failures, each tried again until the limit is back.",
		chartUndecided: "Rises while the topic refuses the relay's records; back to zero once it takes them.",
	},
	"poison": {
		chartPublishes: "From the first dashed line the topic refuses the largest valid events: their attempts fail until they reach the DLQ after a few rejections, while every other event is published.",
		chartTopic:     "The refused events are missing here until the harness replays the dead letters (the last dashed line).",
		chartUndecided: "The refused payments stay undecided until their dead letters are replayed at the end.",
	},
	"dlq-replay": {
		chartPending:    "A dead-lettered event leaves this count (it is failed, not pending) until the harness replays it, a second or two after the topic takes records again; the later events of its payment wait behind it, pending here with the polling relay, dead-lettered behind it and replayed with it with the CDC relay.",
		chartPublishes:  "Between each pair of dashed lines the topic refuses every record as too large: each event the relay sends fails once and goes to the DLQ (RELAY_MAX_REJECTIONS=1), while the payments keep coming.",
		chartTopic:      "The refused events arrive only once replayed, after the topic takes records again; the early copies the harness publishes ahead of the replays count here too.",
		chartUndecided:  "A payment whose creation was dead-lettered stays undecided until its replay reaches the consumer, after the topic takes records again.",
		chartDuplicates: "The harness's early copy of an event waiting behind a dead letter comes first and is parked; the relay's own record of it comes later and is absorbed here.",
	},
	"pg-faults": {
		chartPayments:  "While PostgreSQL is slow, cut or unreachable for the API (dashed lines), the API answers 503 with Retry-After and the clients retry with the same Idempotency-Key: acceptances stall, then catch up.",
		chartPending:   "The relay reaches PostgreSQL through the same faults: it claims nothing while PostgreSQL is unreachable, and the backlog drains after.",
		chartPublishes: "Kafka is not faulted in this run: a pause here is the relay waiting for PostgreSQL, not failing to publish.",
		chartUndecided: "Payments wait only while the relay cannot reach PostgreSQL; Kafka and the consumer are not faulted.",
	},
	"commit-refused": {
		chartPayments:  "At each dashed line the harness ended a transaction of the API between its outbox row and its COMMIT: the API answers 503 and the client retries with the same Idempotency-Key.",
		chartPublishes: "Kafka is not faulted in this run: a refused COMMIT leaves no outbox row, so there is nothing to publish for it.",
	},
	"idempotency-storm": {
		chartPayments:  "Every key comes from four clients at once, and each attempt that times out comes back with the same key: the line counts payments, one per key however many requests carried it. At each dashed line the API was SIGKILLed with requests in flight and restarted; acceptances stall while it is down.",
		chartPublishes: "Kafka is not faulted in this run: a kill stops the relay with the API, and the restarted one publishes what was committed.",
		chartUndecided: "Payments wait only while the API and its relay are down; Kafka and the consumer are not faulted.",
	},
	"consumer-db": {
		chartPayments:  "Only the consumer's database is faulted: the API keeps committing payments, and the relay keeps publishing them.",
		chartPublishes: "Kafka is not faulted in this run.",
		chartDecisions: "Decisions stall while the consumer's database is slow, cut or unreachable (dashed lines): a batch whose transaction failed is retried, never dead-lettered or skipped, so each payment still gets exactly one decision.",
		chartUndecided: "Rises while the consumer cannot commit its batches, and comes back to zero once its database answers again.",
	},
	"db-restart": {
		chartPayments:  "During the restart (between the dashed lines) the API answers 503 and the clients retry with the same Idempotency-Key.",
		chartPending:   "The samples taken while PostgreSQL restarts are missing (a gap in the line), not zero.",
		chartPublishes: "Kafka is not faulted in this run: the relay pauses while PostgreSQL restarts and resumes after.",
	},
	"pg-failover": {
		chartPayments:  "At the first dashed line the primary dies; until the standby is promoted no server accepts writes, the API answers 503 and the clients retry with the same Idempotency-Key. The fail-back (last dashed line) is a shorter gap of the same kind.",
		chartPending:   "The samples taken while no primary answers are missing (a gap in the line), not zero.",
		chartPublishes: "Kafka is not faulted in this run: the relay pauses while no primary answers and resumes on the new one; events it published but could not mark are published again.",
	},
	"pg-failover-async": {
		chartPayments:  "The standby stops receiving WAL at the first dashed line and the primary dies at the second: the payments it answered 201 in between were never on the standby, so after the promotion they are gone, the lesson the verdict counts.",
		chartPending:   "The samples taken while no primary answers are missing (a gap in the line), not zero.",
		chartPublishes: "Kafka is not faulted in this run: some events of the lost payments were published before the kill, so the topic holds events of payments the database no longer has.",
	},
	"long-transaction": {
		chartPending:   "Between the dashed lines a session holds a snapshot, so no dead row version of the outbox can be removed; the relay must still keep up with the incoming rate, so the backlog stays low.",
		chartPublishes: "The same steady rate before, during and after the snapshot: what the verdict's rows check.",
	},
	"broker-failover": clusterReadings,
	"rolling-restart": clusterReadings,
}

// with returns base with over's entries added or replaced.
func with(base, over map[string]string) map[string]string {
	out := maps.Clone(base)
	maps.Copy(out, over)
	return out
}

// readingOf is what a chart of r says under its title: the scenario's reading if it
// has one for the chart, else the general one; the charts that count events say that
// they do, since the load counts payments and each makes several events.
func readingOf(r *verdict.Report, id string) string {
	text, ok := scenarioReadings[r.Scenario][id]
	if !ok {
		text = readings[id]
	}
	units := map[string]string{chartPending: "rows", chartTopic: "records"}
	if unit, counted := units[id]; counted {
		if per, ok := eventsPerPayment(r); ok {
			text += fmt.Sprintf(" It counts events, not payments: the load takes each payment through its lifecycle (created, then captured or refunded), %.1f events a payment in this run, so a burst of payments leaves more %s than payments.", per, unit)
		}
	}
	return text
}

// eventsPerPayment is how many events each committed payment made in a run whose load
// went through the payments' lifecycle; false for a load of creations only.
func eventsPerPayment(r *verdict.Report) (float64, bool) {
	if !r.LifecycleLoad || r.PaymentsCommitted <= 0 || r.UniqueEventsInTopic <= 0 {
		return 0, false
	}
	return float64(r.UniqueEventsInTopic) / float64(r.PaymentsCommitted), true
}
