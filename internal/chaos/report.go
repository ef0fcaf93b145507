package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// A Report is the outcome of one scenario run, written to reports/chaos-<scenario>.json.
// The field names are the ones issue 5 lists; the extra fields explain the numbers.
type Report struct {
	Scenario string `json:"scenario"`
	// Stack is "native" or "compose": where the services ran.
	Stack string `json:"stack"`
	// Valid is true when the faults demonstrably happened (see Checks of kind
	// "validity"); a run where nothing broke proves nothing and never passes.
	Valid bool `json:"valid"`
	// Pass is Valid and every SLO check held. For the dual-write scenario the SLO is
	// inverted: it passes when it demonstrates lost events.
	Pass bool `json:"pass"`

	PaymentsSent int `json:"payments_sent"`
	// WarmupPayments were sent before the faults began, so that the relay had
	// connected and cached metadata; they are committed and checked like the others
	// but not counted in payments_sent or api_accepted.
	WarmupPayments      int `json:"warmup_payments"`
	PaymentsCommitted   int `json:"payments_committed"`
	APIAccepted         int `json:"api_accepted"`
	APIRejected         int `json:"api_rejected"`
	APIRetries          int `json:"api_retries"`
	EventsInTopic       int `json:"events_in_topic"`
	UniqueEventsInTopic int `json:"unique_events_in_topic"`
	Decisions           int `json:"decisions"`

	// Lost counts committed payments missing their event in the topic or their
	// decision; the two parts are reported separately as well.
	Lost           int `json:"lost"`
	LostNoEvent    int `json:"lost_no_event"`
	LostNoDecision int `json:"lost_no_decision"`
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
	// DLQ is rows in outbox_dlq plus outbox rows in status failed.
	DLQ int `json:"dlq"`
	// FailedPublishAttempts is the sum of the API's publish-failure counters, summed
	// over every API process of the run (a killed process loses its counters, so the
	// harness scrapes them before each kill).
	FailedPublishAttempts int `json:"failed_publish_attempts"`
	// DrainSeconds is the time from the end of the load until nothing was left to
	// publish; -1 if it never drained within the deadline.
	DrainSeconds float64 `json:"drain_seconds"`

	LatencyMS    Percentiles  `json:"latency_ms"`
	FaultWindows []Window     `json:"fault_windows"`
	Disruptions  []Disruption `json:"disruptions"`
	Checks       []Check      `json:"checks"`
	Notes        []string     `json:"notes,omitempty"`

	// Evidence is what the harness itself saw of the faults (see evidence.go).
	Evidence *Evidence `json:"evidence,omitempty"`

	RunID            string    `json:"run_id"`
	Topic            string    `json:"topic"`
	PaymentsDatabase string    `json:"payments_database"`
	ConsumerDatabase string    `json:"consumer_database,omitempty"`
	StartedAt        time.Time `json:"started_at"`
	DurationSeconds  float64   `json:"duration_seconds"`
}

// Percentiles of the load generator's request latency, retries included, in ms.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// A Disruption is something the harness did to a process or server: a SIGKILL, a
// restart, a PostgreSQL restart.
type Disruption struct {
	What string `json:"what"`
	// AtSeconds is the offset from the start of the run.
	AtSeconds float64 `json:"at_s"`
	Detail    string  `json:"detail,omitempty"`
}

// CheckKind separates the checks that make a run valid from the SLOs it must meet.
type CheckKind string

const (
	// Validity checks prove the faults happened.
	Validity CheckKind = "validity"
	// SLO checks are the service level objectives of the course.
	SLO CheckKind = "slo"
)

// A Check is one line of the verdict table.
type Check struct {
	Kind CheckKind `json:"kind"`
	Name string    `json:"name"`
	Want string    `json:"want"`
	Got  string    `json:"got"`
	OK   bool      `json:"ok"`
}

// check builds a Check; it keeps the call sites one line each.
func check(kind CheckKind, name, want string, got any, ok bool) Check {
	return Check{Kind: kind, Name: name, Want: want, Got: fmt.Sprint(got), OK: ok}
}

// Judge fills Valid and Pass from the checks.
func (r *Report) Judge() {
	r.Valid = true
	r.Pass = true
	for _, c := range r.Checks {
		if c.OK {
			continue
		}
		r.Pass = false
		if c.Kind == Validity {
			r.Valid = false
		}
	}
	r.Pass = r.Pass && r.Valid
}

// Verdict is the one-word outcome: PASS, FAIL, or INVALID when the faults did not bite.
func (r *Report) Verdict() string {
	switch {
	case !r.Valid:
		return "INVALID"
	case r.Pass:
		return "PASS"
	default:
		return "FAIL"
	}
}

// PrintTable writes the verdict table: the headline numbers, then one line per check.
func (r *Report) PrintTable(w io.Writer) {
	fmt.Fprintf(w, "\nchaos scenario %q on the %s stack: %s\n", r.Scenario, r.Stack, r.Verdict())
	fmt.Fprintf(w, "  sent %d (+%d warm-up), accepted %d, rejected %d, retried %d; committed %d; events in topic %d (unique %d); decisions %d\n",
		r.PaymentsSent, r.WarmupPayments, r.APIAccepted, r.APIRejected, r.APIRetries, r.PaymentsCommitted,
		r.EventsInTopic, r.UniqueEventsInTopic, r.Decisions)
	fmt.Fprintf(w, "  latency ms p50 %.0f p90 %.0f p99 %.0f max %.0f; %d fault windows, %d disruptions\n\n",
		r.LatencyMS.P50, r.LatencyMS.P90, r.LatencyMS.P99, r.LatencyMS.Max, len(r.FaultWindows), len(r.Disruptions))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tCHECK\tWANT\tGOT\tVERDICT")
	for _, c := range r.Checks {
		verdict := "ok"
		if !c.OK {
			verdict = "FAILED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Kind, c.Name, c.Want, c.Got, verdict)
	}
	tw.Flush()
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
