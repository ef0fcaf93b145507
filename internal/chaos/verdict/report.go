package verdict

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dscourse/payments-outbox/internal/chaos/faults"
	"github.com/dscourse/payments-outbox/internal/chaos/load"
	"github.com/dscourse/payments-outbox/internal/chaos/verify"
)

// A Report is the outcome of one scenario run, written to reports/chaos-<scenario>.json.
// Its JSON field names are the report's format, read back by the HTML pages
// (internal/chaos/timeline); the fields after the headline counts explain them.
type Report struct {
	Scenario string `json:"scenario"`
	// RelayMode is the RELAY_MODE of our API ("poll" or "cdc"); empty for a student's
	// service.
	RelayMode string `json:"relay_mode,omitempty"`
	// Stack is "native" or "compose": where the services ran.
	Stack string `json:"stack"`
	// Outcome is the verdict, PASS, FAIL or INVALID, as Judge found it (Verdict), for
	// the readers of the JSON.
	Outcome string `json:"verdict"`
	// Valid is true when the faults demonstrably happened (every check of kind
	// "validity" held).
	Valid bool `json:"valid"`
	// Pass is true when every check held. For the dual-write scenario the lost check is
	// inverted: it holds when the run demonstrates lost events.
	Pass bool `json:"pass"`

	PaymentsSent int `json:"payments_sent"`
	// WarmupPayments were sent before the faults began, so that the relay had
	// connected and cached metadata (and, in the poison scenario, to measure the
	// records: Scenario.BeforeLoad); they are committed and checked like the others
	// but not counted in payments_sent or api_accepted.
	WarmupPayments      int `json:"warmup_payments"`
	PaymentsCommitted   int `json:"payments_committed"`
	APIAccepted         int `json:"api_accepted"`
	APIRejected         int `json:"api_rejected"`
	APIRetries          int `json:"api_retries"`
	EventsInTopic       int `json:"events_in_topic"`
	UniqueEventsInTopic int `json:"unique_events_in_topic"`
	Decisions           int `json:"decisions"`
	// ServerErrors counts the answers 5xx other than 503 with Retry-After, of every
	// attempt the load made (Answers5xxRow).
	ServerErrors load.ServerErrors `json:"server_errors"`
	// SameKey is what the load saw of the keys it sent from several clients at once
	// (SameKeyRow).
	SameKey load.SameKeyStats `json:"same_key"`
	// Storm is the idempotency-storm scenario's answers, kills and keys; nil in the
	// other scenarios.
	Storm *StormReport `json:"storm,omitempty"`

	// Lost counts the payments the service lost: committed but missing their event in
	// the topic or their decision, or answered with 201 but never committed. Each id
	// counts once in Lost; the parts are reported separately as well.
	Lost             int `json:"lost"`
	LostNoEvent      int `json:"lost_no_event"`
	LostNoDecision   int `json:"lost_no_decision"`
	LostNotCommitted int `json:"lost_not_committed"`
	// Phantom counts events or decisions about payments that were never committed.
	Phantom int `json:"phantom"`
	// DuplicatesDelivered counts the copies beyond the first of each X-Event-Id: the
	// copies the consumer had to absorb (records without the header are not copies).
	DuplicatesDelivered int `json:"duplicates_delivered"`
	// ConsumerDuplicates is what the consumer itself counted as duplicate deliveries
	// (its metrics or its dedup table), -1 when it exposes no such count.
	ConsumerDuplicates int `json:"consumer_duplicates_seen"`
	// DuplicateEffects counts payments with more than one decision row plus the users
	// whose running totals differ from the committed payments' (TotalsMismatchedUsers).
	DuplicateEffects int `json:"duplicate_effects"`
	// TotalsMismatchedUsers counts users whose user_totals rows, in any currency, differ
	// from the totals of their committed, decided payments: an event applied twice (or not
	// at all) by a consumer whose dedup failed. 0 when the consumer keeps no user_totals.
	TotalsMismatchedUsers int `json:"totals_mismatched_users"`
	// PaymentsWithSeveralEventIDs counts payments with a transition that has more than
	// one distinct X-Event-Id in the topic: events a consumer cannot recognise as copies.
	PaymentsWithSeveralEventIDs int `json:"payments_with_several_event_ids"`
	// OrderViolations counts payments whose events, by first occurrence in partition
	// offset order, do not follow their sequence (harness/order.go). The SLO is 0.
	OrderViolations int `json:"order_violations"`
	// MultiEventPayments counts payments with more than one event in the topic.
	MultiEventPayments int `json:"multi_event_payments"`
	// TransitionsLost counts committed transitions (payments.version) without an event
	// in the topic; TransitionsPhantom events of transitions that were never committed.
	TransitionsLost    int `json:"transitions_lost"`
	TransitionsPhantom int `json:"transitions_phantom"`
	// ConsumerOrderViolations counts payments whose events the consumer took out of
	// their sequence; ConsumerTransitionsMissing decided payments of which it took fewer
	// events than were committed; ConsumerOwnViolations is its own order_violations
	// count (-1 without the table).
	ConsumerOrderViolations    int `json:"consumer_order_violations"`
	ConsumerTransitionsMissing int `json:"consumer_transitions_missing"`
	ConsumerOwnViolations      int `json:"consumer_own_order_violations"`
	// LifecycleLoad is whether the load sent the payments through their lifecycle: the
	// service captured the first warm-up payment, and the scenario is not the dual write
	// (whose point is a lost creation, and whose handler takes creations only).
	LifecycleLoad bool `json:"lifecycle_load"`
	// Transitions is what the load generator's lifecycle requests saw.
	Transitions load.TransitionStats `json:"transitions"`
	// DecisionEventMismatch counts decisions whose event_id is not the X-Event-Id of
	// their payment's event in the topic.
	DecisionEventMismatch int `json:"decision_event_mismatch"`
	// BadKeys, BadHeaders and BadPayloads count the records that break the record
	// contract (key, headers, PaymentCreated v1 payload); PayloadMismatches counts
	// payments whose event payload differs from the committed payment.
	BadKeys           int `json:"bad_keys"`
	BadHeaders        int `json:"bad_headers"`
	BadPayloads       int `json:"bad_payloads"`
	PayloadMismatches int `json:"payload_mismatches"`
	// TopicPartitions is the topic's partition count; ExpectedPartitions the contract's.
	TopicPartitions    int `json:"topic_partitions"`
	ExpectedPartitions int `json:"expected_partitions"`
	// Schema is which tables of the contract the verifier found.
	Schema verify.Schema `json:"schema"`
	// DLQ is the larger of the rows in outbox_dlq and the outbox rows in status
	// failed.
	DLQ int `json:"dlq"`
	// FailedPublishAttempts is the sum of the API's publish-failure counters, summed
	// over every API process of the run (a killed process loses its counters, so the
	// harness scrapes them before each kill).
	FailedPublishAttempts int `json:"failed_publish_attempts"`
	// DrainSeconds is the time from the end of the load until nothing was left to
	// publish; -1 if it never drained within the deadline.
	DrainSeconds float64 `json:"drain_seconds"`

	LatencyMS    load.Percentiles `json:"latency_ms"`
	FaultWindows []faults.Window  `json:"fault_windows"`
	Disruptions  []Disruption     `json:"disruptions"`
	Checks       []Check          `json:"checks"`
	Notes        []string         `json:"notes,omitempty"`

	// Evidence is what the harness itself saw of the faults (see evidence.go).
	Evidence *Evidence `json:"evidence,omitempty"`
	// Timeline is what the harness sampled during the run, for the charts of the
	// HTML report (see series.go).
	Timeline *Timeline `json:"timeline,omitempty"`
	// Cluster is what the harness saw of the three-node cluster (faults.ClusterWatch);
	// nil for the scenarios on the single broker.
	Cluster *faults.ClusterEvidence `json:"cluster,omitempty"`
	// LongTransaction is the long-transaction scenario's measurements: the relay's
	// throughput and latency per phase, and the outbox table's samples.
	LongTransaction *LongTransactionFigures `json:"long_transaction,omitempty"`

	RunID            string    `json:"run_id"`
	Topic            string    `json:"topic"`
	PaymentsDatabase string    `json:"payments_database"`
	ConsumerDatabase string    `json:"consumer_database,omitempty"`
	StartedAt        time.Time `json:"started_at"`
	DurationSeconds  float64   `json:"duration_seconds"`
}

// A Disruption is something the harness did to a process or server: a SIGKILL, a
// restart, a PostgreSQL restart.
type Disruption struct {
	What string `json:"what"`
	// AtSeconds is the offset from the start of the run.
	AtSeconds float64 `json:"at_s"`
	Detail    string  `json:"detail,omitempty"`
}

// CheckKind separates the checks that make a run valid from the ones the service must
// meet.
type CheckKind string

const (
	// Validity checks prove the faults happened. They can only make a run INVALID.
	Validity CheckKind = "validity"
	// SLO checks are the service level objectives of the course.
	SLO CheckKind = "slo"
	// Contract checks are the rules of docs/contract.md that the verifier relies on:
	// the record's key, headers and payload, the partitions, the tables.
	Contract CheckKind = "contract"
)

// A Check is one line of the verdict table.
type Check struct {
	Kind CheckKind `json:"kind"`
	Name string    `json:"name"`
	Want string    `json:"want"`
	Got  string    `json:"got"`
	OK   bool      `json:"ok"`
	// Off marks a check that could not be made, because the service lacks a table the
	// contract makes optional; Got says which. It counts as held, and is shown as off.
	Off bool `json:"off,omitempty"`
}

// NewCheck builds a Check, with got formatted as fmt.Sprint does: it keeps the rows of
// a scenario one call each.
func NewCheck(kind CheckKind, name, want string, got any, ok bool) Check {
	return Check{Kind: kind, Name: name, Want: want, Got: fmt.Sprint(got), OK: ok}
}

// OffCheck builds a Check that could not be made, and says why in Got.
func OffCheck(kind CheckKind, name, want, why string) Check {
	return Check{Kind: kind, Name: name, Want: want, Got: "off: " + why, OK: true, Off: true}
}

// The verdicts.
const (
	// Pass: every fault bit and every SLO and contract check held.
	Pass = "PASS"
	// Fail: an SLO or contract check failed, whatever the validity checks say:
	// a service that lost events lost them even in a run whose faults partly missed.
	Fail = "FAIL"
	// Invalid: every SLO and contract check held, but a fault did not bite, so
	// the run proves nothing.
	Invalid = "INVALID"
)

// Judge fills Outcome, Valid and Pass from the checks.
func (r *Report) Judge() {
	r.Valid = len(r.validityFailures()) == 0
	r.Pass = r.Valid && len(r.serviceFailures()) == 0
	r.Outcome = r.Verdict()
}

// Verdict is the one-word outcome of the checks: FAIL if any SLO or contract check
// failed, else INVALID if any validity check failed (the faults did not bite), else
// PASS.
func (r *Report) Verdict() string {
	switch {
	case len(r.serviceFailures()) > 0:
		return Fail
	case len(r.validityFailures()) > 0:
		return Invalid
	default:
		return Pass
	}
}

// serviceFailures names the failed checks that count against the service, in table
// order: every kind but validity, so that a kind added later cannot fail without
// failing the run.
func (r *Report) serviceFailures() []string {
	return r.failedWhere(func(k CheckKind) bool { return k != Validity })
}

// validityFailures names the failed validity checks: the faults that did not bite.
func (r *Report) validityFailures() []string {
	return r.failedWhere(func(k CheckKind) bool { return k == Validity })
}

func (r *Report) failedWhere(ofKind func(CheckKind) bool) []string {
	var names []string
	for _, c := range r.Checks {
		if !c.OK && ofKind(c.Kind) {
			names = append(names, c.Name)
		}
	}
	return names
}

// Advice is the line under the verdict table that tells the reader what to do next.
func (r *Report) Advice() string {
	quote := func(names []string) string {
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = strconv.Quote(n)
		}
		return strings.Join(quoted, ", ")
	}
	switch r.Verdict() {
	case Fail:
		advice := "FAIL: the service lost, duplicated or mislabelled events, or broke the contract: fix it; see the rows " +
			quote(r.serviceFailures()) + " and the notes below"
		if bit := r.validityFailures(); len(bit) > 0 {
			advice += "; the faults also missed in " + quote(bit) + ", which does not excuse the failures"
		}
		return advice
	case Invalid:
		return "INVALID: every SLO held, but the run did not test what it must (rows " + quote(r.validityFailures()) +
			": a fault that did not bite, or one the harness could not set up right), so it proves nothing: rerun it, and if it stays INVALID read docs/contract.md on what the faults need from the service"
	default:
		return "PASS: every fault bit and every SLO and contract check held"
	}
}

// PrintTable writes the verdict table: the headline numbers, then one line per check.
func (r *Report) PrintTable(w io.Writer) {
	relay := ""
	if r.RelayMode != "" {
		relay = ", relay " + r.RelayMode
	}
	fmt.Fprintf(w, "\nchaos scenario %q on the %s stack%s: %s\n", r.Scenario, r.Stack, relay, r.Verdict())
	fmt.Fprintf(w, "  sent %d (+%d warm-up), accepted %d, rejected %d, retried %d; committed %d; events in topic %d (unique %d); decisions %d\n",
		r.PaymentsSent, r.WarmupPayments, r.APIAccepted, r.APIRejected, r.APIRetries, r.PaymentsCommitted,
		r.EventsInTopic, r.UniqueEventsInTopic, r.Decisions)
	fmt.Fprintf(w, "  latency ms p50 %.0f p90 %.0f p99 %.0f max %.0f; %d fault windows, %d disruptions\n\n",
		r.LatencyMS.P50, r.LatencyMS.P90, r.LatencyMS.P99, r.LatencyMS.Max, len(r.FaultWindows), len(r.Disruptions))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tCHECK\tWANT\tGOT\tVERDICT")
	for _, c := range r.Checks {
		verdict := "ok"
		switch {
		case !c.OK:
			verdict = "FAILED"
		case c.Off:
			verdict = "off"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Kind, c.Name, c.Want, c.Got, verdict)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n  %s\n", r.Advice())
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// Write stores the report as indented JSON at path, creating its directory.
func (r *Report) Write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create report directory: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// PrintComparison writes the lesson of the module: the outbox run next to the
// dual-write run, under the same faults.
func PrintComparison(w io.Writer, outbox, dualWrite *Report) {
	fmt.Fprintf(w, "\nthe lesson, under the same faults:\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\toutbox (default)\tdual write")
	row := func(name string, a, b any) { fmt.Fprintf(tw, "%s\t%v\t%v\n", name, a, b) }
	row("api_accepted", outbox.APIAccepted, dualWrite.APIAccepted)
	row("payments_committed", outbox.PaymentsCommitted, dualWrite.PaymentsCommitted)
	row("unique_events_in_topic", outbox.UniqueEventsInTopic, dualWrite.UniqueEventsInTopic)
	row("decisions", outbox.Decisions, dualWrite.Decisions)
	row("lost", outbox.Lost, dualWrite.Lost)
	row("phantom", outbox.Phantom, dualWrite.Phantom)
	row("failed_publish_attempts", outbox.FailedPublishAttempts, dualWrite.FailedPublishAttempts)
	row("verdict", outbox.Verdict(), dualWrite.Verdict())
	tw.Flush()
	fmt.Fprintln(w, strings.Repeat("-", 60))
}

// The values of Report.RelayMode and of harness.Options.RelayMode: the relay our API
// runs (RELAY_MODE, cmd/api).
const (
	RelayModePoll = "poll"
	RelayModeCDC  = "cdc"
)

// ValidRelayMode says whether mode is a RELAY_MODE the API accepts.
func ValidRelayMode(mode string) bool { return mode == RelayModePoll || mode == RelayModeCDC }

// FileStem names the files of a run's report, without their extension:
// chaos-<scenario> for the polling relay, chaos-<scenario>-cdc for the CDC relay, so
// that a run in each mode keeps its own JSON report and timeline page.
func (r *Report) FileStem() string {
	if r.RelayMode == RelayModeCDC {
		return "chaos-" + r.Scenario + "-cdc"
	}
	return "chaos-" + r.Scenario
}
